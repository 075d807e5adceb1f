package store

// Value refs (store/langgraph.go): which stored value of (channel, version) a checkpoint reads.
// Savers make versions unique per channel, but not every graph does: a node that re-seeds a
// random generator and is replayed from an earlier checkpoint makes the same version string on
// two branches with different bytes. The first bytes stored under a version are variant 0; other
// bytes under the same version are variants 1, 2, ...; a checkpoint records the variant of each
// of its channels whose value is not variant 0 (most checkpoints record none), so that each
// branch reads its own value.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// ParseValueRefs reads stored value refs: a JSON object channel -> variant (> 0); nil or empty
// text is none.
func ParseValueRefs(b []byte) (map[string]int, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil, nil
	}
	var m map[string]int
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for ch, v := range m {
		if v < 0 {
			return nil, fmt.Errorf("channel %q: variant %d", ch, v)
		}
		if v == 0 {
			delete(m, ch)
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// EncodeValueRefs is the stored text of refs, keys sorted, variants 0 left out; nil when no
// channel has another variant.
func EncodeValueRefs(refs map[string]int) []byte {
	keys := make([]string, 0, len(refs))
	for ch, v := range refs {
		if v != 0 {
			keys = append(keys, ch)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeJSONString(&buf, k)
		buf.WriteByte(':')
		buf.WriteString(strconv.Itoa(refs[k]))
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// LGStoredValue is a stored value of one (channel, version) as a put compares it.
type LGStoredValue struct {
	Variant int
	Type    string
	SHA     []byte // of the bytes as stored
	Size    int64  // raw size
}

// LGMatchVariant returns the variant of stored (all the variants of one (channel, version))
// whose bytes are the put's (same type, raw size and stored SHA-256), or -1 and the variant a
// new value gets (one past the highest).
func LGMatchVariant(stored []LGStoredValue, typ string, p Packed) (match, next int) {
	next = 0
	for _, v := range stored {
		if v.Type == typ && v.Size == int64(p.Size) && bytes.Equal(v.SHA, p.SHA) {
			return v.Variant, 0
		}
		if v.Variant >= next {
			next = v.Variant + 1
		}
	}
	return -1, next
}

// LGInheritedRefs resolves the variants of a put's channels that carry no value in the put (the
// unchanged ones): the parent's variant when the parent names the same version of the channel,
// else newest(channel, version), the variant stored last. given holds the variants of the
// channels the put stores; the result holds every channel of versions.
func LGInheritedRefs(versions []ChanVer, given map[string]int, parent *LGNode, newest func(channel, version string) (int, error)) (map[string]int, error) {
	refs := make(map[string]int, len(versions))
	for _, cv := range versions {
		if v, ok := given[cv.Channel]; ok {
			refs[cv.Channel] = v
			continue
		}
		if parent != nil {
			if pv, ok := parent.Version(cv.Channel); ok && pv == cv.Version {
				refs[cv.Channel] = parent.Variant(cv.Channel)
				continue
			}
		}
		v, err := newest(cv.Channel, cv.Version)
		if err != nil {
			return nil, err
		}
		refs[cv.Channel] = v
	}
	return refs, nil
}

// LGRefKey is one stored value of a (thread, namespace): a blob row's key.
type LGRefKey struct {
	Channel, Version string
	Variant          int
}

// LGReferenced collects the values nodes refer to.
func LGReferenced(nodes []*LGNode) map[LGRefKey]bool {
	out := map[LGRefKey]bool{}
	for _, n := range nodes {
		for _, cv := range n.Versions {
			out[LGRefKey{cv.Channel, cv.Version, n.Variant(cv.Channel)}] = true
		}
	}
	return out
}
