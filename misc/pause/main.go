// Command pause is the pause container of an awsvpc task: PID 1 in the task's
// network namespace, which the task's other containers join. It waits forever,
// reaps the zombies orphaned into it (on SIGCHLD, wait4 with WNOHANG until none
// is left), and exits 0 on SIGTERM or SIGINT. It takes no arguments and prints
// nothing.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	reap() // children that exited before the handler was in place
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking and returns how many it
// collected. SIGCHLD signals coalesce, so one signal may stand for many children.
func reap() (n int) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 { // ECHILD: no children; 0: none exited yet
			return n
		}
		n++
	}
}
