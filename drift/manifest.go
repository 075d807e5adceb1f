package drift

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/zeebo/blake3"
)

// ManifestVersion is the format version written by MarshalManifest.
const ManifestVersion = 1

// AlgorithmBLAKE3 is the content hash recorded in manifests: BLAKE3-256 (about 3x faster
// than SHA-256 on machines without SHA extensions).
const AlgorithmBLAKE3 = "blake3"

// EntryType is the kind of a fingerprinted path.
type EntryType uint8

const (
	TypeFile    EntryType = 1 // regular file, content hashed
	TypeSymlink EntryType = 2 // symbolic link, target recorded, never followed
)

func (t EntryType) String() string {
	switch t {
	case TypeFile:
		return "file"
	case TypeSymlink:
		return "symlink"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Digest is a content hash; it prints and marshals as lower-case hex.
type Digest []byte

func (d Digest) String() string { return hex.EncodeToString(d) }

// MarshalText encodes d as hex.
func (d Digest) MarshalText() ([]byte, error) { return []byte(hex.EncodeToString(d)), nil }

// UnmarshalText decodes hex.
func (d *Digest) UnmarshalText(b []byte) error {
	v, err := hex.DecodeString(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Entry is one fingerprinted path.
type Entry struct {
	Path    string    `json:"path"` // relative to the root, '/'-separated
	Type    EntryType `json:"type"`
	Size    int64     `json:"size"`
	MtimeNs int64     `json:"mtimeNs"`
	CtimeNs int64     `json:"ctimeNs"`
	Ino     uint64    `json:"ino"`
	Mode    uint32    `json:"mode"`             // permission bits (st_mode & 07777)
	Hash    Digest    `json:"hash,omitempty"`   // files; nil when the file could not be read
	Target  string    `json:"target,omitempty"` // symlinks
}

// Dir is a scanned directory; its mtime lets Check skip re-reading unchanged directories.
type Dir struct {
	Path    string `json:"path"` // "" is the root
	MtimeNs int64  `json:"mtimeNs"`
	Ino     uint64 `json:"ino"`
}

// Manifest is a fingerprint of a tree. Treat it as immutable once built: Check and Watch
// may share its slices with the manifests they return.
type Manifest struct {
	Version     int    // ManifestVersion
	Algorithm   string // AlgorithmBLAKE3
	Spec        Spec   // the rules it was taken with; Spec.Root is absolute
	ScanStartNs int64  // entries with mtime or ctime at or after this are "racy"
	Entries     []Entry
	Dirs        []Dir
	Rules       []Entry  // ignore files consulted (.gitignore, .git/info/exclude)
	Warnings    []string // per-path problems (unreadable files, vanished directories...)
}

// Validate checks what a manifest from outside (an imported archive) must hold before it is
// stored or checked against: the current format and algorithm, an absolute root, entries
// sorted by path without duplicates, known entry types, and every path clean and relative
// ('/'-separated, no "", "." or ".." elements, so nothing outside the root is named).
func (m *Manifest) Validate() error {
	switch {
	case m.Version != ManifestVersion:
		return fmt.Errorf("manifest version %d (want %d)", m.Version, ManifestVersion)
	case m.Algorithm != AlgorithmBLAKE3:
		return fmt.Errorf("hash algorithm %q (want %q)", m.Algorithm, AlgorithmBLAKE3)
	case !filepath.IsAbs(m.Spec.Root):
		return fmt.Errorf("root %q is not an absolute path", m.Spec.Root)
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		switch {
		case !fs.ValidPath(e.Path) || e.Path == ".":
			return fmt.Errorf("entry %d: path %q is not a clean relative path", i, e.Path)
		case i > 0 && m.Entries[i-1].Path >= e.Path:
			return fmt.Errorf("entry %d: path %q is not after %q (entries are sorted by path, once each)", i, e.Path, m.Entries[i-1].Path)
		case e.Type != TypeFile && e.Type != TypeSymlink:
			return fmt.Errorf("entry %d (%s): unknown type %d", i, e.Path, e.Type)
		}
	}
	for i, d := range m.Dirs {
		if d.Path != "" && (!fs.ValidPath(d.Path) || d.Path == ".") {
			return fmt.Errorf("directory %d: path %q is not a clean relative path", i, d.Path)
		}
	}
	for i, r := range m.Rules {
		if !fs.ValidPath(r.Path) || r.Path == "." {
			return fmt.Errorf("ignore file %d: path %q is not a clean relative path", i, r.Path)
		}
	}
	return nil
}

// fileStat is the part of struct stat we use.
type fileStat struct {
	mode   uint32 // full st_mode
	size   int64
	mtime  int64
	ctime  int64
	ino    uint64
	dev    uint64
	blocks int64 // 512-byte blocks allocated; -1 unknown
}

// sparse reports a file with fewer blocks allocated than its size needs: it has holes.
func (s fileStat) sparse() bool { return s.blocks >= 0 && s.blocks*512 < s.size }

func (s fileStat) isDir() bool  { return s.mode&sIFMT == sIFDIR }
func (s fileStat) isReg() bool  { return s.mode&sIFMT == sIFREG }
func (s fileStat) isLink() bool { return s.mode&sIFMT == sIFLNK }

// sameStat reports whether e still describes a file with stat st (git's "stat data
// matches").
func (e *Entry) sameStat(st fileStat) bool {
	t := TypeFile
	if st.isLink() {
		t = TypeSymlink
	} else if !st.isReg() {
		return false
	}
	return e.Type == t && e.Size == st.size && e.MtimeNs == st.mtime && e.CtimeNs == st.ctime &&
		e.Ino == st.ino && e.Mode == st.mode&0o7777
}

// reusable reports whether e's hash (or target) can stand for the file with stat st without
// reading it again: same stat data, not racy against verifiedNs, and not a file that could
// not be read then (its hash is missing: try again).
func (e *Entry) reusable(st fileStat, verifiedNs int64) bool {
	return e.sameStat(st) && !e.racy(verifiedNs) && (e.Type != TypeFile || e.Hash != nil)
}

// racy reports whether e was modified so close to (or after) the scan that verified it
// at verifiedNs that a later same-tick modification could leave its stat unchanged.
func (e *Entry) racy(verifiedNs int64) bool {
	return e.MtimeNs >= verifiedNs || e.CtimeNs >= verifiedNs
}

// sameContent reports whether two entries have equal content: type, permission bits, and
// hash (files) or target (symlinks). Size/time/inode do not matter. An entry without a
// hash (unreadable) is compared by stat data instead.
func sameContent(a, b *Entry) bool {
	if a.Type != b.Type || a.Mode != b.Mode {
		return false
	}
	if a.Type == TypeSymlink {
		return a.Target == b.Target
	}
	if a.Hash == nil || b.Hash == nil {
		return a.Hash == nil && b.Hash == nil && a.Size == b.Size && a.MtimeNs == b.MtimeNs &&
			a.CtimeNs == b.CtimeNs && a.Ino == b.Ino
	}
	return a.Size == b.Size && string(a.Hash) == string(b.Hash)
}

// --- encoding ----------------------------------------------------------------------------

var manifestMagic = []byte("CKDM")

const entryEncVersion = 1

// EncodeEntry encodes one entry on its own (a version byte, then the fields); the lead can
// store entries once per EntryKey and manifests as lists of keys.
func EncodeEntry(e Entry) []byte {
	b := make([]byte, 0, 64+len(e.Path)+len(e.Target))
	b = append(b, entryEncVersion)
	b = appendString(b, e.Path)
	return appendEntryBody(b, &e)
}

// DecodeEntry decodes what EncodeEntry produced.
func DecodeEntry(b []byte) (Entry, error) {
	d := decoder{b: b}
	if v := d.byte(); v != entryEncVersion {
		return Entry{}, fmt.Errorf("drift: entry encoding version %d not supported", v)
	}
	var e Entry
	e.Path = d.string()
	d.entryBody(&e)
	if d.err == nil && len(d.b) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return Entry{}, fmt.Errorf("drift: decode entry: %w", d.err)
	}
	return e, nil
}

// EntryKey is a stable 16-byte digest (BLAKE3 of EncodeEntry) identifying an entry's path,
// stat data and content, for de-duplicating entries shared by many manifests. To store a
// manifest that way: keep MarshalManifest of a copy with Entries set to nil as the header,
// plus the ordered list of EntryKey(e) with EncodeEntry(e) stored once per key; to load,
// UnmarshalManifest the header and set Entries to the decoded entries in that order.
func EntryKey(e Entry) []byte {
	sum := blake3.Sum256(EncodeEntry(e))
	return sum[:16]
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendEntryBody(b []byte, e *Entry) []byte {
	b = append(b, byte(e.Type))
	b = binary.AppendVarint(b, e.Size)
	b = binary.AppendVarint(b, e.MtimeNs)
	b = binary.AppendVarint(b, e.CtimeNs)
	b = binary.AppendUvarint(b, e.Ino)
	b = binary.AppendUvarint(b, uint64(e.Mode))
	b = binary.AppendUvarint(b, uint64(len(e.Hash)))
	b = append(b, e.Hash...)
	return appendString(b, e.Target)
}

// MarshalManifest encodes m compactly: a "CKDM" magic and version, the header, then dirs
// and entries with their paths prefix-compressed against the previous one.
func MarshalManifest(m *Manifest) ([]byte, error) {
	if m == nil {
		return nil, errors.New("drift: nil manifest")
	}
	b := make([]byte, 0, 256+len(m.Entries)*72)
	b = append(b, manifestMagic...)
	b = binary.AppendUvarint(b, ManifestVersion)
	b = appendString(b, m.Algorithm)
	b = appendString(b, m.Spec.Root)
	b = appendStrings(b, m.Spec.Include)
	b = appendStrings(b, m.Spec.Exclude)
	var flags byte
	if m.Spec.Gitignore {
		flags |= 1
	}
	if m.Spec.EditorFiles {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, m.ScanStartNs)
	b = appendStrings(b, m.Warnings)
	b = binary.AppendUvarint(b, uint64(len(m.Rules)))
	for i := range m.Rules {
		b = appendString(b, m.Rules[i].Path)
		b = appendEntryBody(b, &m.Rules[i])
	}
	b = binary.AppendUvarint(b, uint64(len(m.Dirs)))
	prev := ""
	for _, d := range m.Dirs {
		b = appendPrefixed(b, prev, d.Path)
		prev = d.Path
		b = binary.AppendVarint(b, d.MtimeNs)
		b = binary.AppendUvarint(b, d.Ino)
	}
	b = binary.AppendUvarint(b, uint64(len(m.Entries)))
	prev = ""
	for i := range m.Entries {
		e := &m.Entries[i]
		b = appendPrefixed(b, prev, e.Path)
		prev = e.Path
		b = appendEntryBody(b, e)
	}
	return b, nil
}

// UnmarshalManifest decodes what MarshalManifest produced.
func UnmarshalManifest(b []byte) (*Manifest, error) {
	if len(b) < len(manifestMagic) || string(b[:len(manifestMagic)]) != string(manifestMagic) {
		return nil, errors.New("drift: not a manifest (bad magic)")
	}
	d := decoder{b: b[len(manifestMagic):]}
	m := &Manifest{}
	v := d.uvarint()
	if d.err == nil && v != ManifestVersion {
		return nil, fmt.Errorf("drift: manifest version %d not supported (want %d)", v, ManifestVersion)
	}
	m.Version = int(v)
	m.Algorithm = d.string()
	m.Spec.Root = d.string()
	m.Spec.Include = d.strings()
	m.Spec.Exclude = d.strings()
	flags := d.byte()
	m.Spec.Gitignore = flags&1 != 0
	m.Spec.EditorFiles = flags&2 != 0
	m.ScanStartNs = d.varint()
	m.Warnings = d.strings()
	n := d.count()
	m.Rules = make([]Entry, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		var e Entry
		e.Path = d.string()
		d.entryBody(&e)
		m.Rules = append(m.Rules, e)
	}
	n = d.count()
	m.Dirs = make([]Dir, 0, n)
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		var dir Dir
		dir.Path = d.prefixed(prev)
		prev = dir.Path
		dir.MtimeNs = d.varint()
		dir.Ino = d.uvarint()
		m.Dirs = append(m.Dirs, dir)
	}
	n = d.count()
	m.Entries = make([]Entry, 0, n)
	prev = ""
	for i := 0; i < n && d.err == nil; i++ {
		var e Entry
		e.Path = d.prefixed(prev)
		prev = e.Path
		d.entryBody(&e)
		m.Entries = append(m.Entries, e)
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = errors.New("trailing bytes")
	}
	if d.err != nil {
		return nil, fmt.Errorf("drift: decode manifest: %w", d.err)
	}
	return m, nil
}

func appendStrings(b []byte, ss []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ss)))
	for _, s := range ss {
		b = appendString(b, s)
	}
	return b
}

func appendPrefixed(b []byte, prev, s string) []byte {
	n := 0
	for n < len(prev) && n < len(s) && prev[n] == s[n] {
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	return appendString(b, s[n:])
}

type decoder struct {
	b   []byte
	err error
}

var errShort = errors.New("truncated")

func (d *decoder) fail(err error) {
	if d.err == nil {
		d.err = err
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.fail(errShort)
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail(errShort)
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length that must be plausible for the remaining input.
func (d *decoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail(errShort)
		return 0
	}
	return int(n)
}

func (d *decoder) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) string() string { return string(d.bytes()) }

func (d *decoder) strings() []string {
	n := d.count()
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.string())
	}
	return out
}

func (d *decoder) prefixed(prev string) string {
	n := d.uvarint()
	if n > uint64(len(prev)) {
		d.fail(errors.New("bad path prefix"))
		return ""
	}
	return prev[:n] + d.string()
}

func (d *decoder) entryBody(e *Entry) {
	e.Type = EntryType(d.byte())
	e.Size = d.varint()
	e.MtimeNs = d.varint()
	e.CtimeNs = d.varint()
	e.Ino = d.uvarint()
	e.Mode = uint32(d.uvarint())
	if h := d.bytes(); len(h) > 0 {
		e.Hash = Digest(append([]byte(nil), h...))
	}
	e.Target = d.string()
	if d.err == nil && e.Type != TypeFile && e.Type != TypeSymlink {
		d.fail(fmt.Errorf("bad entry type %d", e.Type))
	}
}
