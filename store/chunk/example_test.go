package chunk_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/ckptd/ckptd/store/chunk"
)

// A backend in miniature: chunks and runs in maps, each stored once.
func Example() {
	chunks := map[chunk.Address][]byte{}
	runs := map[chunk.Address][]byte{}
	save := func(v []byte) chunk.Index {
		recipe, cs := chunk.Split(v)
		for _, c := range cs {
			chunks[c.Addr] = bytes.Clone(c.Data) // a real backend compresses each new chunk
		}
		idx, rs := recipe.Runs()
		for _, r := range rs {
			runs[r.Addr] = r.Data
		}
		return idx
	}
	fetch := func(m map[chunk.Address][]byte) chunk.FetchFunc {
		return func(a chunk.Address) ([]byte, error) {
			if b, ok := m[a]; ok {
				return b, nil
			}
			return nil, chunk.ErrNotFound
		}
	}
	load := func(idx chunk.Index) ([]byte, error) {
		recipe, err := chunk.Expand(idx, fetch(runs))
		if err != nil {
			return nil, err
		}
		return chunk.Reassemble(recipe, fetch(chunks))
	}

	var msgs []string
	for i := 0; i < 2000; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"message number %d"}`, i))
	}
	v1 := []byte(`{"messages":[` + strings.Join(msgs, ",") + `]}`)
	idx1 := save(v1)
	n := len(chunks)
	v2 := []byte(`{"messages":[` + strings.Join(append(msgs, `{"role":"tool","content":"one more"}`), ",") + `]}`)
	idx2 := save(v2)
	fmt.Println("new chunks for the second value:", len(chunks)-n)

	got, err := load(idx2)
	fmt.Println(bytes.Equal(got, v2), err)

	for a := range chunks {
		chunks[a] = append([]byte("x"), chunks[a][1:]...) // damage every chunk
	}
	_, err = load(idx1)
	fmt.Println(errors.Is(err, chunk.ErrCorrupt))
	// Output:
	// new chunks for the second value: 1
	// true <nil>
	// true
}
