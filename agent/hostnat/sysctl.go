package hostnat

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/berth-agent/berth/agent/errdefs"
)

// localnet reads and writes net.ipv4.conf.<bridge>.route_localnet.
type localnet interface {
	// get reports whether route_localnet is on for bridge; it wraps errdefs.ErrNotFound when the
	// interface does not exist.
	get(bridge string) (bool, error)
	// set turns route_localnet on or off for bridge.
	set(bridge string, on bool) error
}

// procLocalnet is the real localnet, through /proc/sys. The files there belong to the network
// namespace of the thread that opens them, as iptables' rules belong to the namespace its process
// starts in: both act where the caller's thread is.
type procLocalnet struct{ root string }

var _ localnet = procLocalnet{}

func (p procLocalnet) path(bridge string) string {
	return filepath.Join(p.root, "net", "ipv4", "conf", bridge, "route_localnet")
}

func (p procLocalnet) get(bridge string) (bool, error) {
	b, err := os.ReadFile(p.path(bridge))
	if errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("bridge %q: %w", bridge, errdefs.New(errdefs.ErrNotFound, "no such interface"))
	}
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) != "0", nil
}

func (p procLocalnet) set(bridge string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	f, err := os.OpenFile(p.path(bridge), os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("bridge %q: %w", bridge, errdefs.New(errdefs.ErrNotFound, "no such interface"))
	}
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
