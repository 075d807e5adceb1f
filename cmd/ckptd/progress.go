package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// progress reports a long operation on stderr: on a terminal a bar redrawn in place (at most
// every 100ms) with rate and ETA; otherwise plain lines at every tenth, without timings, so logs
// stay readable and stable.
type progress struct {
	w          io.Writer
	tty        bool
	noun       string // "states"
	totalBytes int64  // estimated bytes behind total, for the rate; 0: no rate

	start     time.Time
	lastDraw  time.Time
	lastTenth int
	finished  bool

	// spinner of a phase without progress (tty only)
	stop chan struct{}
	wg   sync.WaitGroup
}

const barWidth = 24

func newProgress(w io.Writer, tty bool, noun string, totalBytes int64) *progress {
	return &progress{w: w, tty: tty, noun: noun, totalBytes: totalBytes, start: time.Now()}
}

// update reports done of total.
func (p *progress) update(done, total int) {
	if p.finished || total <= 0 {
		return
	}
	if !p.tty {
		if tenth := done * 10 / total; tenth > p.lastTenth {
			p.lastTenth = tenth
			fmt.Fprintf(p.w, "verify: %s %d%% (%d/%d)\n", p.noun, done*100/total, done, total)
		}
		if done >= total {
			p.finished = true
		}
		return
	}
	now := time.Now()
	if done < total && now.Sub(p.lastDraw) < 100*time.Millisecond {
		return
	}
	p.lastDraw = now
	elapsed := now.Sub(p.start)
	if done >= total {
		p.finished = true
		line := fmt.Sprintf("checked %d %s", total, p.noun)
		if p.totalBytes > 0 {
			line += fmt.Sprintf(" (%s) in %s, %s/s", fmtBytes(p.totalBytes), elapsed.Round(time.Millisecond),
				fmtBytes(rate(p.totalBytes, elapsed)))
		} else {
			line += " in " + elapsed.Round(time.Millisecond).String()
		}
		fmt.Fprintf(p.w, "\r\x1b[K%s\n", line)
		return
	}
	filled := done * barWidth / total
	bar := strings.Repeat("#", filled) + strings.Repeat(".", barWidth-filled)
	line := fmt.Sprintf("checking %s [%s] %3d%%  %d/%d", p.noun, bar, done*100/total, done, total)
	if p.totalBytes > 0 && elapsed > 0 && done > 0 {
		doneBytes := int64(float64(p.totalBytes) * float64(done) / float64(total))
		line += fmt.Sprintf("  %s/s", fmtBytes(rate(doneBytes, elapsed)))
		eta := time.Duration(float64(elapsed) * float64(total-done) / float64(done))
		line += "  ETA " + eta.Round(time.Second).String()
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s", line)
}

func rate(n int64, d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(float64(n) / d.Seconds())
}

// phase announces a step that reports no progress; on a terminal it shows the elapsed time
// until endPhase.
func (p *progress) phase(what string) {
	if !p.tty {
		fmt.Fprintf(p.w, "verify: %s\n", what)
		return
	}
	p.stop = make(chan struct{})
	start := time.Now()
	fmt.Fprintf(p.w, "\r\x1b[K%s…", what)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				fmt.Fprintf(p.w, "\r\x1b[K%s: done in %s\n", what, time.Since(start).Round(time.Millisecond))
				return
			case <-t.C:
				fmt.Fprintf(p.w, "\r\x1b[K%s… %s", what, time.Since(start).Round(time.Second))
			}
		}
	}()
}

// abort ends an unfinished bar's line so that an error message starts on its own line.
func (p *progress) abort() {
	p.endPhase()
	if p.tty && !p.finished && !p.lastDraw.IsZero() {
		fmt.Fprintln(p.w)
	}
	p.finished = true
}

// endPhase ends the step started by phase.
func (p *progress) endPhase() {
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
		p.stop = nil
	}
}
