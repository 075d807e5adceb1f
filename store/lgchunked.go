package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/ckptd/ckptd/store/chunk"
	"github.com/ckptd/ckptd/store/chunk/delta"
)

// Chunked LangGraph channel values and their wire deltas (docs/storage.md "Chunked values",
// docs/protocol.md lg/put "delta"): written once here for every backend. A channel value larger
// than chunk.InlineMax is stored like a large state: its lg_blobs row keeps the index (encoding
// EncChunked, size and sha256 the raw value's), its chunks and runs are shared with every other
// value and state. A put may send a value as a delta against the channel's previous version.

// LGDelta says a blob of a put was sent as a wire delta: its Data is only the middle bytes, the
// rest is kept from the value stored under (channel, BaseVersion) in the same thread and
// namespace.
type LGDelta struct {
	BaseVersion string // canonical JSON text
	KeepPrefix  int64
	KeepSuffix  int64
	SHA256      string // lowercase hex of the rebuilt value
	// Copies splice ranges of the base into the middle: the middle is the segment with, at
	// each At (an offset in the segment, non-decreasing), the base's bytes [From, From+Length)
	// inserted. A value whose header and tail both changed (a msgpack list that grew: its count
	// at the start, the new item at the end) is then a delta too.
	Copies []LGCopy
}

// LGCopy is one range of the base spliced into a delta's middle (LGDelta.Copies).
type LGCopy struct{ At, From, Length int64 }

// middle builds a delta's middle from the segment and its copies of base; errors name field.
func (d *LGDelta) middle(field string, base, seg []byte) ([]byte, error) {
	if len(d.Copies) == 0 {
		return seg, nil
	}
	n := int64(len(seg))
	for _, c := range d.Copies {
		n += c.Length
	}
	out := make([]byte, 0, n)
	prev := int64(0)
	for i, c := range d.Copies {
		f := fmt.Sprintf("%s.copies[%d]", field, i)
		switch {
		case c.At < prev || c.At > int64(len(seg)):
			return nil, Invalid(f, "at %d is outside the segment (%d bytes) or before the previous copy's", c.At, len(seg))
		case c.From < 0 || c.Length < 0 || c.From > int64(len(base)) || c.Length > int64(len(base))-c.From:
			return nil, Invalid(f, "base range [%d, %d+%d) is outside the base (%d bytes)", c.From, c.From, c.Length, len(base))
		}
		out = append(out, seg[prev:c.At]...)
		out = append(out, base[c.From:c.From+c.Length]...)
		prev = c.At
	}
	return append(out, seg[prev:]...), nil
}

// LGValueCache keeps the last value put of each (thread, namespace, channel), with its recipe
// when it was cut: the base the channel's next value is cut from (chunk.SplitFrom) and the usual
// base of a wire delta. It is a StateCache keyed by channel; entries are content-addressed by the
// version they were put under and their SHA-256, and a delta's rebuilt bytes are checked against
// the SHA-256 the client sent, so a stale entry is never wrong.
type LGValueCache struct{ c *StateCache }

// NewLGValueCache returns a cache of at most max bytes; nil (every call a no-op) when max <= 0.
func NewLGValueCache(max int64) *LGValueCache {
	c := NewStateCache(max)
	if c == nil {
		return nil
	}
	return &LGValueCache{c: c}
}

func lgKey(parts ...string) string {
	b := make([]byte, 0, 64)
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	return string(b)
}

// Put records value as the last one put of the channel, under version.
func (c *LGValueCache) Put(thread, ns, channel, version string, value []byte, sum [32]byte, recipe *chunk.Recipe) {
	if c == nil {
		return
	}
	c.c.Put(&StateEntry{CheckpointID: lgKey(thread, ns, channel, version), WorkflowID: lgKey(thread, channel), Namespace: ns,
		SHA256: sum, Value: value, Recipe: recipe})
}

// Last returns the last value put of the channel, or nil.
func (c *LGValueCache) Last(thread, ns, channel string) *StateEntry {
	if c == nil {
		return nil
	}
	return c.c.Last(lgKey(thread, channel), ns)
}

// Version returns the channel's value put under version if it is the last one kept, or nil.
func (c *LGValueCache) Version(thread, ns, channel, version string) *StateEntry {
	if c == nil {
		return nil
	}
	return c.c.ByID(lgKey(thread, ns, channel, version))
}

// LGBaseReader reads, verified, the raw bytes of every stored variant of (channel, version) in
// (thread, ns): the candidates of a delta's base when the cache does not hold it. None stored:
// an empty slice.
type LGBaseReader func(ctx context.Context, thread, ns, channel, version string) ([][]byte, error)

// ResolveLGDeltas replaces every blob of req sent as a delta by the value it describes: the base
// from cache when it holds (channel, BaseVersion), else each stored variant in turn (read), the
// one whose rebuilt value has the sent SHA-256 winning. Checks, in order: a base exists
// (ErrNotFound: missing or deleted), keepPrefix, keepSuffix and sha256's form against it (-32602
// naming blobs[i].delta.*), the rebuilt size against maxBytes (> 0; *TooLargeError), the rebuilt
// SHA-256 (-32602 blobs[i].delta.sha256).
func ResolveLGDeltas(ctx context.Context, req *LGPutRequest, cache *LGValueCache, read LGBaseReader, maxBytes int64) error {
	for i := range req.Blobs {
		b := &req.Blobs[i]
		d := b.Delta
		if d == nil {
			continue
		}
		field := fmt.Sprintf("blobs[%d].delta", i)
		const maxInt = int64(^uint(0) >> 1)
		kp, ks := int(min(max(d.KeepPrefix, -1), maxInt)), int(min(max(d.KeepSuffix, -1), maxInt))
		copied := int64(0)
		for _, c := range d.Copies {
			copied += max(c.Length, 0)
		}
		if maxBytes > 0 {
			if n := int64(kp) + int64(len(b.Data)) + copied + int64(ks); n > maxBytes {
				return fmt.Errorf("%s: value rebuilt from the delta: %w", field, &TooLargeError{Limit: maxBytes, Size: n})
			}
		}
		var bases [][]byte
		if e := cache.Version(req.ThreadID, req.Namespace, b.Channel, d.BaseVersion); e != nil {
			bases = append(bases, e.Value)
		}
		var out []byte
		var firstErr error
		try := func(base []byte) bool {
			mid, err := d.middle(field, base, b.Data)
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return false
			}
			v, err := delta.Apply(base, kp, ks, mid, d.SHA256)
			if err == nil {
				out = v
				return true
			}
			if firstErr == nil {
				firstErr = err
			}
			return false
		}
		ok := len(bases) > 0 && try(bases[0])
		if !ok && read != nil {
			stored, err := read(ctx, req.ThreadID, req.Namespace, b.Channel, d.BaseVersion)
			if err != nil {
				return err
			}
			for _, base := range stored {
				if ok = try(base); ok {
					break
				}
			}
			if len(stored) == 0 && len(bases) == 0 {
				return &LGBaseMissingError{Field: field + ".baseVersion", Channel: b.Channel, Version: d.BaseVersion}
			}
		}
		if !ok {
			var de *delta.Error
			if errors.As(firstErr, &de) {
				de = de.In(field)
				return Invalid(de.Path(), "%s", de.Reason)
			}
			var ie *InvalidError
			if errors.As(firstErr, &ie) {
				return firstErr
			}
			if firstErr == nil {
				firstErr = ErrNotFound
			}
			return fmt.Errorf("%s: %w", field, firstErr)
		}
		sum, err := hex.DecodeString(d.SHA256)
		if err == nil && len(sum) == sha256.Size {
			b.sum = (*[32]byte)(sum)
		}
		b.Data, b.Delta = out, nil
	}
	return nil
}

// LGBaseMissingError says the base version of a blob's wire delta is not stored (never put, or
// deleted since): the client sends the value whole. It matches ErrNotFound.
type LGBaseMissingError struct {
	Field   string // blobs[i].delta.baseVersion
	Channel string
	Version string // canonical JSON text
}

func (e *LGBaseMissingError) Error() string {
	return fmt.Sprintf("%s: channel %q has no stored value at version %s (never put, or deleted): send the value whole: %v",
		e.Field, e.Channel, e.Version, ErrNotFound)
}

func (e *LGBaseMissingError) Is(target error) bool { return target == ErrNotFound }

// LGPacker packs the values of puts and imports: values larger than chunk.InlineMax are cut
// into chunks (from the channel's last value in Cache when there is one), the others packed as
// before (Pack).
type LGPacker struct {
	Threshold int    // Pack's threshold (< 0: never compress)
	Codec     *Codec // compresses chunks (nil: stored raw)
	Cache     *LGValueCache
}

// Value packs one channel value put under (thread, ns, channel, version) and remembers it as the
// channel's last value. A chunked value comes back with Enc EncChunked, Data its index, SHA the
// raw value's SHA-256 and CV set.
func (pk LGPacker) Value(thread, ns, channel, version string, v []byte) Packed {
	return pk.value(thread, ns, channel, version, v, nil)
}

// value is Value with v's SHA-256 already known when sum is not nil.
func (pk LGPacker) value(thread, ns, channel, version string, v []byte, sum *[32]byte) Packed {
	if chunk.Inline(len(v)) {
		p := Pack(v, pk.Threshold)
		if pk.Cache != nil && len(v) > 0 {
			h := sum
			if h == nil {
				s := sha256.Sum256(v)
				h = &s
			}
			pk.Cache.Put(thread, ns, channel, version, keptData(v, sum), *h, nil)
		}
		return p
	}
	var base *ValueBase
	if e := pk.Cache.Last(thread, ns, channel); e != nil {
		base = e.Base()
	}
	cv := newChunkedValue(v, sum, base, pk.Codec, pk.Threshold >= 0 && len(v) > pk.Threshold)
	if pk.Cache != nil {
		pk.Cache.Put(thread, ns, channel, version, keptData(v, sum), cv.Index.SHA256, &cv.Recipe)
	}
	return Packed{Enc: EncChunked, Size: len(v), SHA: cv.SHA256(), Data: cv.IndexData(), CV: cv}
}

// Plain packs a value that is never chunked (a checkpoint, an empty value).
func (pk LGPacker) Plain(v []byte) Packed { return Pack(v, pk.Threshold) }

// Write packs a pending-write value or a staged value (lg/putWrites, lg/putValue): one larger
// than chunk.InlineMax is cut into chunks shared with every other value (Enc EncChunked, Data its
// index, SHA the raw value's SHA-256, CV set), the others are packed whole. A write is no version
// of an earlier value: it is cut without a base, and the channel's value cache is left alone.
func (pk LGPacker) Write(v []byte) Packed {
	if chunk.Inline(len(v)) {
		return Pack(v, pk.Threshold)
	}
	cv := newChunkedValue(v, nil, nil, pk.Codec, pk.Threshold >= 0 && len(v) > pk.Threshold)
	return Packed{Enc: EncChunked, Size: len(v), SHA: cv.SHA256(), Data: cv.IndexData(), CV: cv}
}
