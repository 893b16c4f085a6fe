package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/berth-agent/berth/agent/dockerclient"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return f != nil && term.IsTerminal(int(f.Fd())) }

// rawTerminal puts the terminal f into raw mode, so keys (Ctrl-C too) go to the command in the
// container, and returns the function that restores it.
func rawTerminal(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	state, err := term.MakeRaw(fd)
	if err != nil {
		return nil, err
	}
	return func() { _ = term.Restore(fd, state) }, nil
}

// windowSizes sends the terminal f's size, then its new size at each SIGWINCH, until ctx ends; the
// channel keeps only the latest size not yet taken.
func windowSizes(ctx context.Context, f *os.File) <-chan dockerclient.WindowSize {
	out := make(chan dockerclient.WindowSize, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	send := func() {
		w, h, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return
		}
		select {
		case <-out: // drop the size not taken yet: the latest wins
		default:
		}
		out <- dockerclient.WindowSize{Height: uint(h), Width: uint(w)}
	}
	send()
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				send()
			}
		}
	}()
	return out
}
