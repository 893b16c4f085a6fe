//go:build integration

package ecscni

import (
	"context"
	"crypto/rand"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
)

// TestIntegrationENIWatcher: the watcher returns when an interface with the MAC appears after it
// started waiting, at once when it exists already, and with the context's error when it never does.
func TestIntegrationENIWatcher(t *testing.T) {
	hw := net.HardwareAddr{0x02, 0xbe, 0, 0, 0, 0}
	_, _ = rand.Read(hw[2:])
	name := "btwait" + randHex(3)
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})

	waited := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { waited <- ENIWatcher{}.WaitForMAC(ctx, hw.String()) }()
	select {
	case err := <-waited:
		t.Fatalf("returned before the interface existed: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, addSinkLink(netlink.LinkAttrs{Name: name, HardwareAddr: hw}))
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not see the interface appear")
	}

	require.NoError(t, ENIWatcher{}.WaitForMAC(context.Background(), hw.String()), "an existing interface is found at once")

	short, cancelShort := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelShort()
	err := ENIWatcher{}.WaitForMAC(short, "02:be:ff:ff:ff:ff")
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "02:be:ff:ff:ff:ff")
}
