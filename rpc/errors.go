package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/ckptd/ckptd/protocol"
	"github.com/ckptd/ckptd/store"
)

// rpcError builds a JSON-RPC error with optional data.
func rpcError(code int64, msg string, data any) *jsonrpc2.Error {
	e := &jsonrpc2.Error{Code: code, Message: msg}
	if data != nil {
		e.SetError(data)
	}
	return e
}

// invalidParams names the field and the problem.
func invalidParams(field, reason string) *jsonrpc2.Error {
	msg := "invalid params: " + reason
	if field != "" {
		msg = "invalid params: " + field + ": " + reason
	}
	return rpcError(protocol.CodeInvalidParams, msg, map[string]string{"field": field, "reason": reason})
}

// decodeParams decodes a params object into v. Absent or null params decode as {}. A name v
// does not take, or takes spelt otherwise (case included), is refused (rpc/strict.go).
func decodeParams(raw json.RawMessage, v any) *jsonrpc2.Error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	if raw[0] != '{' {
		return invalidParams("params", "must be an object")
	}
	if err := checkParamKeys(raw, v, ""); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			field := te.Field
			if field == "" {
				field = "params"
			}
			return invalidParams(field, fmt.Sprintf("expected %s, got JSON %s", goTypeName(te.Type.String()), te.Value))
		}
		return invalidParams("params", err.Error())
	}
	return nil
}

func goTypeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch {
	case strings.HasPrefix(t, "int"), strings.HasPrefix(t, "uint"):
		return "integer"
	case t == "string":
		return "string"
	case t == "bool":
		return "boolean"
	case strings.HasPrefix(t, "[]"):
		return "array"
	case strings.HasPrefix(t, "map["), strings.HasPrefix(t, "rpc."), strings.HasPrefix(t, "protocol."), strings.HasPrefix(t, "drift."):
		return "object"
	}
	return t
}

// storeErrorWith maps a store error and, for not-found and conflict errors, attaches data
// naming what was looked for (e.g. {"checkpointId": "c-1"}).
func storeErrorWith(err error, key, value string) *jsonrpc2.Error {
	e := storeError(err)
	if e != nil && (e.Code == protocol.CodeNotFound || e.Code == protocol.CodeConflict) && e.Data == nil {
		e.SetError(map[string]string{key: value})
	}
	return e
}

// storeError maps a store error onto the protocol's error codes.
func storeError(err error) *jsonrpc2.Error {
	if err == nil {
		return nil
	}
	var je *jsonrpc2.Error
	if errors.As(err, &je) {
		return je
	}
	if e := asClaimed(err); e != nil {
		return e
	}
	var ce *store.CorruptError
	if errors.As(err, &ce) {
		data := map[string]any{"checkpointId": ce.CheckpointID, "reason": ce.Reason}
		if len(ce.AlsoCorrupt) > 0 {
			also := make([]protocol.Recovered, len(ce.AlsoCorrupt))
			for i, r := range ce.AlsoCorrupt {
				also[i] = protocol.Recovered{CheckpointID: r.CheckpointID, Reason: r.Reason}
			}
			data["alsoCorrupt"] = also
		}
		return rpcError(protocol.CodeCorrupt, err.Error(), data)
	}
	var ie *store.InvalidError
	if errors.As(err, &ie) {
		return invalidParams(ie.Field, ie.Reason)
	}
	var ue *store.UnavailableError
	if errors.As(err, &ue) { // the backend stopped writing: data.reason is the stable Reason
		return rpcError(protocol.CodeUnavailable, err.Error(), map[string]string{"reason": ue.Reason})
	}
	var bm *store.LGBaseMissingError
	if errors.As(err, &bm) { // lg/put's blobs[i].delta names a version not stored
		return rpcError(protocol.CodeNotFound, bm.Error(), map[string]any{"field": bm.Field, "channel": bm.Channel,
			"baseVersion": json.RawMessage(bm.Version)})
	}
	var tl *store.TooLargeError
	if errors.As(err, &tl) {
		return rpcError(protocol.CodeTooLarge, err.Error(), map[string]int64{"limit": tl.Limit, "size": tl.Size})
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rpcError(protocol.CodeNotFound, err.Error(), nil)
	case errors.Is(err, store.ErrConflict):
		return rpcError(protocol.CodeConflict, err.Error(), nil)
	case errors.Is(err, store.ErrTooLarge):
		return rpcError(protocol.CodeTooLarge, err.Error(), nil)
	case errors.Is(err, store.ErrClosed):
		return rpcError(protocol.CodeShuttingDown, "shutting down: "+err.Error(), nil)
	case errors.Is(err, store.ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		return rpcError(protocol.CodeUnavailable, err.Error(), map[string]string{"reason": err.Error()})
	}
	return rpcError(protocol.CodeInternal, "internal error: "+err.Error(), nil)
}
