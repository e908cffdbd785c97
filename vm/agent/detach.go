package agent

import (
	"fmt"
	"time"
)

// Detach lets go of a process without ending it: blocked reads of its
// output and Wait return at once with an error, and the process runs on in
// the guest exactly as it does when a connection breaks. For a host that
// stops following a long-running process (the agent of a turn) and picks it
// up later by other means.
func (p *Process) Detach() {
	now := time.Now()
	if p.oneStream() {
		_ = p.st.SetReadDeadline(now)
		p.abort(fmt.Errorf("agent exec pid %d: detached", p.pid))
		go p.in.Close() // not here: a write blocked on a full input window holds the writer
		return
	}
	_ = p.stdout.SetReadDeadline(now)
	_ = p.stderr.SetReadDeadline(now)
	_ = p.ctl.SetReadDeadline(now)
	_ = p.stdin.Close()
}
