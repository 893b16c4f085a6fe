package ecscni

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
)

// ENIWatcher waits for ENIs to appear on the host through netlink link notifications.
type ENIWatcher struct{}

// WaitForMAC returns once an interface with the MAC address exists in the host namespace. It
// subscribes to link updates before it lists the links, so an interface that appears meanwhile is not
// missed, and it never polls. ctx bounds the wait.
func (ENIWatcher) WaitForMAC(ctx context.Context, mac string) error {
	want, err := net.ParseMAC(mac)
	if err != nil {
		return fmt.Errorf("ENI MAC %q: %w", mac, err)
	}
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{}); err != nil {
		return fmt.Errorf("subscribe to link updates: %w", err)
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("list links: %w", err)
	}
	for _, l := range links {
		if sameMAC(l.Attrs().HardwareAddr, want) {
			return nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no interface with MAC %s appeared: %w", mac, ctx.Err())
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("link updates stopped while waiting for MAC %s", mac)
			}
			if u.Link != nil && sameMAC(u.Link.Attrs().HardwareAddr, want) {
				return nil
			}
		}
	}
}

func sameMAC(a, b net.HardwareAddr) bool {
	return len(a) > 0 && strings.EqualFold(a.String(), b.String())
}
