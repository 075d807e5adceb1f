package drift

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/zeebo/blake3"
)

// storedTree writes n small files in three directories, plus a symlink.
func storedTree(t *testing.T, n int) string {
	t.Helper()
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("pkg%d/f%03d.go", i%3, i)] = fmt.Sprintf("package p\n// file %d\n", i)
	}
	root := mkTree(t, files)
	require.NoError(t, os.Symlink("pkg0", filepath.Join(root, "link")))
	return root
}

func TestEncodeDecodeStored(t *testing.T) {
	for _, n := range []int{0, 1, 40, 700} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			m := scanT(t, Spec{Root: storedTree(t, n)}, nil)
			em, err := EncodeManifest(m, nil)
			require.NoError(t, err)
			require.Equal(t, len(m.Entries), em.Files())
			require.Equal(t, m.Spec.Root, em.Root())
			total := 0
			for _, c := range em.Chunks {
				require.Equal(t, ChunkID(c.Keys), c.ID)
				require.Len(t, c.Keys, len(c.Entries)*KeyLen)
				require.LessOrEqual(t, len(c.Entries), maxChunkFiles)
				for k, data := range c.Entries {
					e, err := DecodeEntry(data)
					require.NoError(t, err)
					require.Equal(t, m.Entries[total], e)
					require.Equal(t, EntryKey(e), c.Keys[k*KeyLen:(k+1)*KeyLen])
					total++
				}
			}
			require.Equal(t, len(m.Entries), total)
			if n >= 700 {
				require.Greater(t, len(em.Chunks), 3, "a large manifest is cut into chunks")
			}
			got, err := DecodeStored(em.Header, em.Chunks)
			require.NoError(t, err)
			want, err := MarshalManifest(m)
			require.NoError(t, err)
			have, err := MarshalManifest(got)
			require.NoError(t, err)
			require.Equal(t, want, have, "the decoded manifest encodes like the original")
		})
	}
}

// TestEncodeStoredReuse: entries equal to the previous encoding's are reused, and the result is
// the same as encoding from scratch.
func TestEncodeStoredReuse(t *testing.T) {
	root := storedTree(t, 40)
	m1 := scanT(t, Spec{Root: root}, nil)
	e1, err := EncodeManifest(m1, nil)
	require.NoError(t, err)
	write(t, root, "pkg0/f000.go", "changed")
	m2 := scanT(t, Spec{Root: root}, m1)
	reused, err := EncodeManifest(m2, e1)
	require.NoError(t, err)
	fresh, err := EncodeManifest(m2, nil)
	require.NoError(t, err)
	require.Equal(t, fresh.Chunks, reused.Chunks)
	require.Equal(t, fresh.keys, reused.keys)
	require.Equal(t, fresh.data, reused.data)
	for i, e := range m2.Entries {
		require.Equal(t, EntryKey(e), reused.keys[i])
	}
	// one edited file changes one chunk
	changed := 0
	for i := range e1.Chunks {
		if !bytes.Equal(e1.Chunks[i].ID, reused.Chunks[i].ID) {
			changed++
		}
	}
	require.Equal(t, 1, changed)
}

// TestDecodeStoredDamage: every kind of damage to the storage form is an error naming it, never
// a manifest with other files.
func TestDecodeStoredDamage(t *testing.T) {
	m := scanT(t, Spec{Root: storedTree(t, 60)}, nil)
	em, err := EncodeManifest(m, nil)
	require.NoError(t, err)
	clone := func() []StoredChunk {
		out := make([]StoredChunk, len(em.Chunks))
		for i, c := range em.Chunks {
			out[i] = StoredChunk{ID: bytes.Clone(c.ID), Keys: bytes.Clone(c.Keys)}
			for _, d := range c.Entries {
				out[i].Entries = append(out[i].Entries, bytes.Clone(d))
			}
		}
		return out
	}
	fi := 0 // the first entry with a content hash (a file, not the symlink)
	for len(m.Entries[fi].Hash) == 0 {
		fi++
	}
	flipped := m.Entries[fi]
	flipped.Hash = append(Digest(nil), flipped.Hash...)
	flipped.Hash[0] ^= 1
	// where entry fi sits among the chunks
	fc, fk := 0, fi
	for fk >= len(em.Chunks[fc].Entries) {
		fk -= len(em.Chunks[fc].Entries)
		fc++
	}
	for _, tc := range []struct {
		name   string
		header []byte
		mut    func(cs []StoredChunk) []StoredChunk
		want   string
	}{
		{"header", []byte{0}, nil, "stored source manifest does not decode"},
		{"chunk lost keys", nil, func(cs []StoredChunk) []StoredChunk {
			cs[0].Keys, cs[0].Entries = cs[0].Keys[KeyLen:], cs[0].Entries[1:]
			return cs
		}, "chunk 0 of"},
		{"chunk id", nil, func(cs []StoredChunk) []StoredChunk { cs[1].ID[0] ^= 1; return cs }, "is missing or damaged"},
		{"entry changed", nil, func(cs []StoredChunk) []StoredChunk {
			cs[fc].Entries[fk] = EncodeEntry(flipped)
			return cs
		}, fmt.Sprintf("entry %d of %d is damaged (BLAKE3 mismatch)", fi, len(m.Entries))},
		{"entry bytes", nil, func(cs []StoredChunk) []StoredChunk {
			cs[0].Entries[1] = append(cs[0].Entries[1], 0)
			return cs
		}, "BLAKE3 mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			header, chunks := em.Header, clone()
			if tc.header != nil {
				header = tc.header
			}
			if tc.mut != nil {
				chunks = tc.mut(chunks)
			}
			_, err := DecodeStored(header, chunks)
			require.ErrorContains(t, err, tc.want)
		})
	}

	var c StoredChecker
	ch := em.Chunks[0]
	require.NoError(t, c.CheckChunk(ch.ID, ch.Keys))
	require.ErrorContains(t, c.CheckChunk(ch.ID, ch.Keys[KeyLen:]), "BLAKE3 mismatch")
	require.NoError(t, c.CheckEntry(ch.Keys[:KeyLen], ch.Entries[0]))
	require.ErrorContains(t, c.CheckEntry(EntryKey(m.Entries[fi]), EncodeEntry(flipped)), "BLAKE3 mismatch")
	bad := []byte{9, 9}
	sum := blake3.Sum256(bad)
	require.Error(t, c.CheckEntry(sum[:KeyLen], bad), "a well-addressed entry that does not decode")
	require.NoError(t, c.CheckHeader(em.Header))
	require.Error(t, c.CheckHeader([]byte("CKDM")))
}
