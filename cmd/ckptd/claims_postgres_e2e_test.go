package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The hand-over end-to-end tests (claims_e2e_test.go) on PostgreSQL: worker processes on one
// database, as on several hosts, each started the way a host would start it, with the URL (and
// its password) in CKPTD_DB; none of them may show the password.
func init() {
	e2eBackends = append(e2eBackends, e2eBackend{"postgres", func(t *testing.T) func(t *testing.T) *daemon {
		u := pgURL(t)
		return func(t *testing.T) *daemon {
			cmd := exec.Command(binPath)
			cmd.Env = append(os.Environ(), "CKPTD_DB="+u)
			for _, arg := range cmd.Args {
				if strings.Contains(arg, pgPassword) {
					t.Fatalf("the password is on the command line: %q", cmd.Args)
				}
			}
			var d *daemon
			t.Cleanup(func() { // after the daemon's own cleanup has waited for it to exit
				if d != nil {
					noPassword(t, "the daemon's log", d.stderrText())
				}
			})
			d = startDaemonCmd(t, cmd)
			return d
		}
	}})
}
