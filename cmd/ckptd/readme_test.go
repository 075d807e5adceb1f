package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "Inspecting checkpoints" block shows ckptd commands with their output. Every
// output it shows is checked here against what the command printed in a test: the golden file
// the CLI tests write for the same command on the same fixture (cli_test.go), or, for recover,
// the report of recover_test.go's damaged database. The README may leave lines out (an excerpt,
// or "..."); every line it shows must be printed, in that order (spaces between columns aside).

// readmeExample is one "$ ckptd ..." line of the README's block and the output lines under it.
type readmeExample struct {
	cmd string
	out []string
}

// readmeExamples parses the console block of the README section titled section.
func readmeExamples(t *testing.T, section string) []readmeExample {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "\n## "+section+"\n")
	require.GreaterOrEqual(t, i, 0, "README section %q", section)
	s = s[i:]
	start := strings.Index(s, "```console\n")
	require.GreaterOrEqual(t, start, 0, "no console block in %q", section)
	s = s[start+len("```console\n"):]
	s = s[:strings.Index(s, "\n```")]
	comment := regexp.MustCompile(`\s{2,}#.*$`)
	var out []readmeExample
	for _, line := range strings.Split(s, "\n") {
		switch {
		case strings.HasPrefix(line, "$ "):
			out = append(out, readmeExample{cmd: strings.TrimSpace(comment.ReplaceAllString(line[2:], ""))})
		case strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#"):
			// a blank line, or a comment continued under the command
		default:
			require.NotEmpty(t, out, "output before any command: %q", line)
			out[len(out)-1].out = append(out[len(out)-1].out, line)
		}
	}
	return out
}

// squeeze collapses the runs of spaces between table columns.
func squeeze(s string) string { return strings.Join(strings.Fields(s), " ") }

// requireShownLines checks that every line of shown (but "...") is a line of printed, in order.
func requireShownLines(t *testing.T, what string, shown []string, printed string) {
	t.Helper()
	lines := strings.Split(printed, "\n")
	j := 0
	for _, l := range shown {
		if strings.TrimSpace(l) == "..." {
			continue
		}
		for j < len(lines) && squeeze(lines[j]) != squeeze(l) {
			j++
		}
		require.Less(t, j, len(lines), "%s: the README shows %q, which the command does not print (in that order):\n%s", what, l, printed)
		j++
	}
}

// goldenStdout is the stdout section of testdata/cli/name.golden.
func goldenStdout(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(cliGoldenDir + "/" + name + ".golden")
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "-- stdout --\n")
	j := strings.Index(s, "-- stderr --\n")
	require.True(t, i >= 0 && j > i, "golden %s", name)
	return s[i+len("-- stdout --\n") : j]
}

// TestReadmeInspectingOutputIsPrinted: the README's CLI outputs are what ckptd prints.
func TestReadmeInspectingOutputIsPrinted(t *testing.T) {
	// README command -> the golden of the same command on the CLI tests' fixture, and the
	// fixture's paths as the README writes them
	goldens := map[string]struct {
		name    string
		replace []string
	}{
		"ckptd ls":                              {name: "ls"},
		"ckptd ls wf-alpha":                     {name: "ls-workflow"},
		"ckptd threads":                         {name: "threads"},
		"ckptd plan wf-beta --workflow-hash h2": {name: "plan-problems"},
		"ckptd drift wf-src":                    {name: "drift", replace: []string{"$DIR/src", "/home/me/agent/src"}},
		"ckptd verify":                          {name: "verify-ok"},
		"ckptd import wf-alpha.ckpt --db other.db": {name: "import-none",
			replace: []string{"$DIR/alpha-none.ckpt", "wf-alpha.ckpt"}},
	}
	checked := 0
	for _, ex := range readmeExamples(t, "Inspecting checkpoints") {
		if len(ex.out) == 0 {
			continue
		}
		if strings.HasPrefix(ex.cmd, "ckptd recover ") {
			continue // TestReadmeRecoverReportIsPrinted
		}
		g, ok := goldens[ex.cmd]
		require.True(t, ok, "the README shows the output of %q: give it a golden here", ex.cmd)
		printed := goldenStdout(t, g.name)
		for i := 0; i+1 < len(g.replace); i += 2 {
			printed = strings.ReplaceAll(printed, g.replace[i], g.replace[i+1])
		}
		requireShownLines(t, ex.cmd, ex.out, printed)
		checked++
	}
	require.Equal(t, len(goldens), checked, "every README example with a golden was found")
}
