package store

// Verification of the source manifests recorded with checkpoints, as the store keeps them:
// opaque byte strings (ManifestRecord, types.go).
//
// Their encoder (drift.EncodeManifest) cuts a manifest into a header and chunks of entries; a
// chunk is a run of entry keys, named by an id, and each entry is a byte string named by its key.
// Ids and keys are content addresses of ManifestKeyLen bytes, so a backend stores each distinct
// chunk and each distinct entry once, counting references, and consecutive manifests of a tree
// share nearly everything. The store never decodes any of it: it checks only that a manifest it
// reads back is complete (every chunk and entry row present); drift checks the addresses.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// SourcesOfConfig returns the sources spec held in a workflow's stored configuration (the JSON
// object of workflows.config; empty: none), or nil when it holds none. A configuration that does
// not decode holds none; err says why (the caller logs it and goes on).
func SourcesOfConfig(cfg []byte) (json.RawMessage, error) {
	if len(cfg) == 0 {
		return nil, nil
	}
	var c struct {
		Sources json.RawMessage `json:"sources"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		return nil, fmt.Errorf("workflow config does not decode: %w", err)
	}
	if len(c.Sources) == 0 || string(c.Sources) == "null" {
		return nil, nil
	}
	return c.Sources, nil
}

// VerifyManifests re-checks every stored source manifest: each entry row against its content
// address and its decoding, each chunk against its id and the entries it lists, each manifest's
// header and chunk list. It names every checkpoint whose manifest a drift check could not load,
// with the first reason. Reads only.
func VerifyManifests(ctx context.Context, st Manifests, c ManifestChecker) (ManifestCounts, []ManifestProblem, error) {
	var counts ManifestCounts
	var out []ManifestProblem
	// entry key -> "" (sound) or the reason it is not; the same for chunk ids
	entries, chunks := map[string]string{}, map[string]string{}
	err := st.ScanManifests(ctx, ManifestScan{
		Entry: func(key, data []byte) error {
			counts.Entries++
			entries[string(key)] = ""
			if err := c.CheckEntry(key, data); err != nil {
				entries[string(key)] = fmt.Sprintf("file entry %s: %v", hex.EncodeToString(key), err)
			}
			return nil
		},
		Chunk: func(id, keys []byte) error {
			chunks[string(id)] = chunkProblem(c, id, keys, entries)
			return nil
		},
		Manifest: func(m StoredManifest) error {
			counts.Manifests++
			if r := manifestProblem(c, m.Header, m.ChunkIDs, chunks); r != "" {
				out = append(out, ManifestProblem{CheckpointID: m.CheckpointID, WorkflowID: m.WorkflowID, Seq: m.Seq, Reason: r})
			}
			return nil
		},
	})
	if err != nil {
		return ManifestCounts{}, nil, err
	}
	return counts, out, nil
}

// chunkProblem checks one stored chunk against the entries found; "" when it is sound.
func chunkProblem(c ManifestChecker, id, keys []byte, entries map[string]string) string {
	if err := c.CheckChunk(id, keys); err != nil {
		return fmt.Sprintf("entry chunk %s: %v", hex.EncodeToString(id), err)
	}
	switch {
	case len(keys)%ManifestKeyLen != 0:
		return fmt.Sprintf("entry chunk %s: key list of %d bytes", hex.EncodeToString(id), len(keys))
	}
	for i := 0; i < len(keys); i += ManifestKeyLen {
		k := keys[i : i+ManifestKeyLen]
		r, ok := entries[string(k)]
		if !ok {
			return fmt.Sprintf("entry chunk %s: file entry %s is missing", hex.EncodeToString(id), hex.EncodeToString(k))
		}
		if r != "" {
			return r
		}
	}
	return ""
}

// manifestProblem checks one stored manifest against the chunks found; "" when it is sound.
func manifestProblem(c ManifestChecker, header, ids []byte, chunks map[string]string) string {
	if err := c.CheckHeader(header); err != nil {
		return "source manifest header: " + err.Error()
	}
	if len(ids)%ManifestKeyLen != 0 {
		return fmt.Sprintf("source manifest: chunk list of %d bytes", len(ids))
	}
	for i := 0; i < len(ids); i += ManifestKeyLen {
		id := ids[i : i+ManifestKeyLen]
		r, ok := chunks[string(id)]
		if !ok {
			return fmt.Sprintf("source manifest: entry chunk %s is missing", hex.EncodeToString(id))
		}
		if r != "" {
			return "source manifest: " + r
		}
	}
	return ""
}

// CheckManifest checks one manifest as a backend returned it (Manifests.Manifest, or a
// checkpoint's Manifest): its shape, its header, each chunk against its id and each entry
// against its key, with c (drift.StoredChecker). nil when a drift check could load it.
func CheckManifest(c ManifestChecker, m ManifestRecord) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("source manifest: %w", err)
	}
	if err := c.CheckHeader(m.Header); err != nil {
		return fmt.Errorf("source manifest header: %w", err)
	}
	for _, ch := range m.Chunks {
		if err := c.CheckChunk(ch.ID, ch.Keys); err != nil {
			return fmt.Errorf("entry chunk %s: %w", hex.EncodeToString(ch.ID), err)
		}
		for i, data := range ch.Entries {
			key := ch.Keys[i*ManifestKeyLen : (i+1)*ManifestKeyLen]
			if err := c.CheckEntry(key, data); err != nil {
				return fmt.Errorf("file entry %s: %w", hex.EncodeToString(key), err)
			}
		}
	}
	return nil
}
