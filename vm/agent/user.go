package agent

// The unprivileged user every box has (vm/guest/pid1 writes it into the box's
// root at boot). ExecRequest.User names it to run a process as it; "" runs
// as root, as the agent always did.
const (
	AgentUser = "agent"
	AgentUID  = 1000
	AgentGID  = 1000
	AgentHome = "/home/agent"
	// AgentShell is the login shell written for the user.
	AgentShell = "/bin/sh"
)
