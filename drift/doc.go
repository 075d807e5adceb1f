// Package drift fingerprints source trees and detects drift from a recorded fingerprint.
//
// It is a pure library: it knows nothing of JSON-RPC or SQLite, logs only through the
// *slog.Logger it is given, and keeps no global state.
//
//   - Scan walks a tree (what a Spec selects: include/exclude globs with doublestar "**",
//     .gitignore files with git's semantics, never .git, never editor temp files) and
//     returns a Manifest: per regular file its path, size, mtime, ctime, inode, permission
//     bits and BLAKE3 hash; per symlink its target (symlinks are never followed); per
//     directory its mtime. Given the previous manifest it is incremental like git's index.
//   - Check answers "did it drift?" without a full walk: lstat of the manifest's files and
//     directories, re-hash of suspects only, getdents only of directories whose mtime moved.
//   - Diff compares two manifests; Report is what both return.
//   - Watch keeps the answer current from inotify (fsnotify) events, emitting a Batch per
//     settled burst of changes, and answers Status from memory after a cookie sync.
//   - MarshalManifest/UnmarshalManifest, EncodeEntry/DecodeEntry and EntryKey serialize
//     manifests, whole or entry by entry for de-duplicated storage; EncodeManifest and
//     DecodeStored put a manifest in the storage form ckptd's store keeps (a header plus
//     content-addressed chunks of entries, stored.go) and read it back, checking every address.
//
// Racy entries: a file whose mtime or ctime is not older than the start of the scan that
// hashed it (taken from the kernel's coarse clock, minus its resolution: file time stamps
// come from that clock in steps of a few milliseconds) could be rewritten in the same tick
// without its stat data changing, so it is always re-hashed; the same rule makes Check
// re-read racy directories.
package drift
