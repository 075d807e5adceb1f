package drift

// The storage form of a manifest: how ckptd keeps the manifest recorded with each checkpoint so
// that consecutive manifests of a tree share almost all of their bytes.
//
// A manifest is stored as a header (MarshalManifest of the manifest without its entries) and
// its entries, each encoded on its own (EncodeEntry) and named by its content address
// (EntryKey), cut into runs of consecutive keys ("chunks", about 32 keys, cut after paths whose
// hash says so, so an edit, addition or removal changes only the chunk around it), each chunk
// named by the content address of its key list. A store keeps each distinct chunk and each
// distinct entry once; it sees only byte strings and their 16-byte names. DecodeStored checks
// every address on the way back, so a damaged row reads as damage, never as a changed tree.

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/zeebo/blake3"
)

// KeyLen is the length of an entry key (EntryKey) and of a chunk id.
const KeyLen = 16

const (
	chunkCutMask  = 31  // a chunk ends after a path whose FNV-1a hash has these bits clear (~32 keys)
	maxChunkFiles = 256 // and after this many keys at most
)

// StoredChunk is one chunk of a manifest's entries in storage form.
type StoredChunk struct {
	ID      []byte   // ChunkID(Keys)
	Keys    []byte   // the EntryKey of each entry, concatenated, in path order
	Entries [][]byte // EncodeEntry of each entry, Entries[i] named by Keys[i*KeyLen:(i+1)*KeyLen]
}

// ChunkID is the content address of a chunk's key list: the first KeyLen bytes of its BLAKE3.
func ChunkID(keys []byte) []byte {
	sum := blake3.Sum256(keys)
	return sum[:KeyLen:KeyLen]
}

// EncodedManifest is a manifest in storage form, made by EncodeManifest.
type EncodedManifest struct {
	m      *Manifest
	Header []byte        // MarshalManifest of the manifest without its entries
	Chunks []StoredChunk // its entries, in order
	keys   [][]byte      // EntryKey of each entry
	data   [][]byte      // EncodeEntry of each entry
}

// Manifest is the manifest em encodes (shared: do not modify).
func (em *EncodedManifest) Manifest() *Manifest { return em.m }

// Files is the number of entries (files and symlinks) of the manifest.
func (em *EncodedManifest) Files() int { return len(em.keys) }

// Root is the manifest's absolute sources root.
func (em *EncodedManifest) Root() string { return em.m.Spec.Root }

// EncodeManifest puts m in storage form. prev, optional, is an earlier encoding of the same tree
// (say the previous save's): entries equal to one of its entries reuse its encoding instead of
// being encoded and hashed again.
func EncodeManifest(m *Manifest, prev *EncodedManifest) (*EncodedManifest, error) {
	if m == nil {
		return nil, errors.New("encode manifest: nil manifest")
	}
	h := *m
	h.Entries = nil
	header, err := MarshalManifest(&h)
	if err != nil {
		return nil, fmt.Errorf("encode manifest: %w", err)
	}
	n := len(m.Entries)
	em := &EncodedManifest{m: m, Header: header, keys: make([][]byte, n), data: make([][]byte, n)}
	var old []Entry
	if prev != nil && prev.m.Spec.Root == m.Spec.Root {
		old = prev.m.Entries
	}
	j, lo := 0, 0
	for i := range m.Entries {
		e := &m.Entries[i]
		// both lists are sorted by path: a merge walk finds prev's entry of the same path
		for j < len(old) && old[j].Path < e.Path {
			j++
		}
		if j < len(old) && sameEntry(&old[j], e) {
			em.keys[i], em.data[i] = prev.keys[j], prev.data[j]
		} else {
			em.data[i] = EncodeEntry(*e)
			sum := blake3.Sum256(em.data[i]) // = EntryKey(*e), without encoding it twice
			em.keys[i] = sum[:KeyLen:KeyLen]
		}
		if i+1 == n || i+1-lo >= maxChunkFiles || cutAfter(e.Path) {
			keys := make([]byte, 0, (i+1-lo)*KeyLen)
			for _, k := range em.keys[lo : i+1] {
				keys = append(keys, k...)
			}
			em.Chunks = append(em.Chunks, StoredChunk{ID: ChunkID(keys), Keys: keys, Entries: em.data[lo : i+1 : i+1]})
			lo = i + 1
		}
	}
	return em, nil
}

// cutAfter says whether a chunk ends after the entry of path p: a function of the path alone,
// so chunk boundaries stay put when entries around them change.
func cutAfter(p string) bool {
	h := fnv.New64a()
	_, _ = h.Write([]byte(p))
	return h.Sum64()&chunkCutMask == 0
}

// sameEntry reports whether two entries encode identically (hence have the same EntryKey).
func sameEntry(a, b *Entry) bool {
	return a.Path == b.Path && a.Type == b.Type && a.Size == b.Size && a.MtimeNs == b.MtimeNs &&
		a.CtimeNs == b.CtimeNs && a.Ino == b.Ino && a.Mode == b.Mode && a.Target == b.Target &&
		string(a.Hash) == string(b.Hash)
}

// DecodeStored rebuilds a manifest from its storage form, checking every chunk's key list
// against its id and every entry against its key. Its errors describe the damage ("stored
// source manifest: ..."); the chunks must be complete (a store reports missing rows itself).
func DecodeStored(header []byte, chunks []StoredChunk) (*Manifest, error) {
	m, err := UnmarshalManifest(header)
	if err != nil {
		return nil, fmt.Errorf("stored source manifest does not decode: %w", err)
	}
	n := 0
	for _, c := range chunks {
		n += len(c.Entries)
	}
	m.Entries = make([]Entry, 0, n)
	i := 0
	for ci, c := range chunks {
		// The id is the chunk's content address: a chunk that lost or changed keys would
		// otherwise load as a manifest with files silently missing (reported as added).
		if len(c.Keys) != len(c.Entries)*KeyLen || string(ChunkID(c.Keys)) != string(c.ID) {
			return nil, fmt.Errorf("stored source manifest: chunk %d of %d is missing or damaged", ci, len(chunks))
		}
		for k, data := range c.Entries {
			// entries are content-addressed too: changed bytes would read as a changed file
			if sum := blake3.Sum256(data); string(sum[:KeyLen]) != string(c.Keys[k*KeyLen:(k+1)*KeyLen]) {
				return nil, fmt.Errorf("stored source manifest: entry %d of %d is damaged (BLAKE3 mismatch)", i, n)
			}
			e, err := DecodeEntry(data)
			if err != nil {
				return nil, fmt.Errorf("stored source manifest: %w", err)
			}
			m.Entries = append(m.Entries, e)
			i++
		}
	}
	return m, nil
}

// StoredChecker checks the rows of manifests in storage form one by one, for a verification
// that reads every stored row once (ckptd verify). Its errors say what is wrong, not where.
type StoredChecker struct{}

// CheckEntry checks one stored entry against its key and that it decodes.
func (StoredChecker) CheckEntry(key, data []byte) error {
	if sum := blake3.Sum256(data); string(sum[:KeyLen]) != string(key) {
		return errors.New("BLAKE3 mismatch")
	}
	_, err := DecodeEntry(data)
	return err
}

// CheckChunk checks one stored chunk's key list against its id.
func (StoredChecker) CheckChunk(id, keys []byte) error {
	if string(ChunkID(keys)) != string(id) {
		return errors.New("BLAKE3 mismatch")
	}
	return nil
}

// CheckHeader checks that a stored header decodes.
func (StoredChecker) CheckHeader(header []byte) error {
	_, err := UnmarshalManifest(header)
	return err
}
