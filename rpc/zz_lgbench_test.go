package rpc

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

func TestZZLGListTiming(t *testing.T) {
	c := newLGConn(t)
	big := bytes.Repeat([]byte("the agent tool call result user assistant message plan "), 2200)
	for i := 0; i < 50; i++ {
		blob := append([]byte(fmt.Sprint(i)), big...)
		c.ok(MethodLGPut, map[string]any{"threadId": "t", "checkpointId": fmt.Sprintf("c%03d", i),
			"checkpoint": map[string]any{"type": "msgpack", "offset": 0, "length": 300},
			"channelVersions": map[string]any{"m": i}, "blobs": []map[string]any{{"channel": "m", "version": i, "type": "msgpack", "offset": 300, "length": len(blob)}}},
			append(make([]byte, 300), blob...), nil)
	}
	var lr LGListResult
	for r := 0; r < 3; r++ {
		start := time.Now()
		n := 30
		for i := 0; i < n; i++ {
			c.ok(MethodLGList, map[string]any{"threadId": "t", "namespace": "", "limit": 10}, nil, &lr)
		}
		t.Logf("lg/list 10 x %d KB over pipes: %v", len(big)/1024, time.Since(start)/time.Duration(n))
		start = time.Now()
		for i := 0; i < n; i++ {
			c.ok(MethodLGGet, map[string]any{"threadId": "t"}, nil, nil)
		}
		t.Logf("lg/get: %v", time.Since(start)/time.Duration(n))
	}
}
