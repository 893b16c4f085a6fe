package ecscni

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/containernetworking/plugins/pkg/netlinksafe"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// errNetNSGone is returned by the netns helpers when the namespace path does not exist.
var errNetNSGone = errors.New("network namespace is gone")

// inNetNS runs fn inside the network namespace at path, on an OS thread locked for the call and
// never reused by another goroutine in that namespace (ns.WithNetNSPath). Every netlink call this
// package makes in a task namespace goes through here. It wraps errNetNSGone when path does not
// exist.
func inNetNS(path string, fn func() error) error {
	err := ns.WithNetNSPath(path, func(ns.NetNS) error { return fn() })
	if _, ok := err.(ns.NSPathNotExistErr); ok {
		return fmt.Errorf("%s: %w", path, errNetNSGone)
	}
	return err
}

// netnsID identifies the namespace at path by its nsfs inode. A /proc/<pid>/ns/net path outlives
// its pause container when the pid is reused; comparing the ID recorded at set-up with the current
// one keeps teardown out of a namespace that is no longer the task's. It wraps errNetNSGone when
// path does not exist.
func netnsID(path string) (string, error) {
	h, err := ns.GetNS(path)
	if err != nil {
		if _, ok := err.(ns.NSPathNotExistErr); ok {
			return "", fmt.Errorf("%s: %w", path, errNetNSGone)
		}
		return "", err
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return "", fmt.Errorf("stat %s: %w", path, err)
	}
	return strconv.FormatUint(st.Ino, 10), nil
}

// imdsRoute is the route that makes the instance metadata service unreachable: a prohibit route
// rejects a connection at once (EACCES) instead of letting it time out.
func imdsRoute() *netlink.Route {
	return &netlink.Route{
		Dst:   &net.IPNet{IP: net.ParseIP(IMDSAddress).To4(), Mask: net.CIDRMask(32, 32)},
		Type:  unix.RTN_PROHIBIT,
		Table: unix.RT_TABLE_MAIN,
	}
}

// blockIMDS adds (or replaces, so an additional local route cannot re-open it) the prohibit route
// to 169.254.169.254/32 in the namespace at path. The route dies with the namespace.
func blockIMDS(path string) error {
	return inNetNS(path, func() error {
		if err := netlink.RouteReplace(imdsRoute()); err != nil {
			return fmt.Errorf("add prohibit route to %s: %w", IMDSAddress, err)
		}
		return nil
	})
}

// imdsBlocked reports whether the namespace at path holds the prohibit route to 169.254.169.254/32.
func imdsBlocked(path string) (bool, error) {
	var blocked bool
	err := inNetNS(path, func() error {
		want := imdsRoute()
		routes, err := netlinksafe.RouteListFiltered(netlink.FAMILY_V4, want, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
		if err != nil {
			return fmt.Errorf("list routes to %s: %w", IMDSAddress, err)
		}
		for _, r := range routes {
			if r.Type == unix.RTN_PROHIBIT {
				blocked = true
			}
		}
		return nil
	})
	return blocked, err
}

// linkExists reports whether the namespace at path has an interface named name. It wraps
// errNetNSGone when path does not exist.
func linkExists(path, name string) (bool, error) {
	var found bool
	err := inNetNS(path, func() error {
		_, err := netlinksafe.LinkByName(name)
		var notFound netlink.LinkNotFoundError
		switch {
		case err == nil:
			found = true
		case errors.As(err, &notFound):
		default:
			return fmt.Errorf("look up %s: %w", name, err)
		}
		return nil
	})
	return found, err
}
