package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ckptd/ckptd/framing"
)

// versionLine is what `ckptd version` prints: version, commit, Go version, platform.
var versionLine = regexp.MustCompile(`^ckptd (\S+) \(commit (\S+), (go\S+), (\S+/\S+)\)\n$`)

// TestCLIVersion: `version`, `--version` and `-version` print the same line, `--json` the same facts.
func TestCLIVersion(t *testing.T) {
	first := cliRun(t, nil, "version")
	require.Equal(t, 0, first.code, first.stderr)
	m := versionLine.FindStringSubmatch(first.stdout)
	require.NotNil(t, m, "unexpected version line %q", first.stdout)
	assert.Equal(t, "0.1.0-dev", m[1], "a plain go build is the -dev version")
	assert.NotEmpty(t, m[2])
	assert.Equal(t, runtime.Version(), m[3])
	assert.Equal(t, runtime.GOOS+"/"+runtime.GOARCH, m[4])

	for _, args := range [][]string{{"--version"}, {"-version"}} {
		res := cliRun(t, nil, args...)
		assert.Equal(t, 0, res.code, "%v: %s", args, res.stderr)
		assert.Equal(t, first.stdout, res.stdout, "%v", args)
		assert.Empty(t, res.stderr, "%v", args)
	}

	js := cliRun(t, nil, "version", "--json")
	require.Equal(t, 0, js.code, js.stderr)
	var b buildInfo
	require.NoError(t, json.Unmarshal([]byte(js.stdout), &b))
	assert.Equal(t, buildInfo{Version: m[1], Commit: m[2], GoVersion: m[3], Platform: m[4]}, b)

	bad := cliRun(t, nil, "version", "extra")
	assert.Equal(t, exitUsage, bad.code)
	assert.Contains(t, bad.stderr, `unexpected argument "extra"`)
}

// TestVersionStamped: a binary built the way scripts/dist.sh builds it reports the stamped
// version and commit, and initialize's serverVersion is the same version.
func TestVersionStamped(t *testing.T) {
	if testing.Short() {
		t.Skip("builds another binary")
	}
	bin := filepath.Join(t.TempDir(), "ckptd-stamped")
	const ver, sha = "9.8.7-test", "0123456789abcdef0123456789abcdef01234567"
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+ver+" -X main.commit="+sha, "-o", bin, ".")
	build.Env = append(cliEnv(t, nil), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)

	res, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Equal(t, "ckptd "+ver+" (commit "+sha+", "+runtime.Version()+", "+runtime.GOOS+"/"+runtime.GOARCH+")\n", string(res))

	cmd := exec.Command(bin, "--db", filepath.Join(t.TempDir(), "v.db"))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &syncWriter{w: &stderr}
	require.NoError(t, cmd.Start())
	d := &daemon{t: t, cmd: cmd, stdin: stdin, r: framing.NewReader(stdout, framing.Limits{MaxBody: 1 << 20}), stderr: &stderr}
	var hello struct {
		ServerVersion   string `json:"serverVersion"`
		ProtocolVersion int    `json:"protocolVersion"`
	}
	d.call("initialize", map[string]any{}, nil, &hello)
	assert.Equal(t, ver, hello.ServerVersion)
	assert.Equal(t, 1, hello.ProtocolVersion)
	require.NoError(t, stdin.Close())
	require.NoError(t, waitExit(cmd, 10*time.Second), stderr.String())
}
