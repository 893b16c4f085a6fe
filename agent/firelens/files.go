package firelens

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/atomicfile"
)

// The modes of a task's FireLens files: its directories and the configuration files, which hold the
// outputs' secret values, are the owner's only.
const (
	dirMode  = 0o700
	fileMode = 0o600
)

// mkdirPrivate makes dir (its parent exists) with dirMode, or sets that mode on the directory there;
// a symbolic link or a file in its place is an error.
func mkdirPrivate(dir string) error {
	if err := os.Mkdir(dir, dirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("make %s: something other than a directory is in its place", dir)
	}
	if err := os.Chmod(dir, dirMode); err != nil {
		return fmt.Errorf("make %s: %w", dir, err)
	}
	return nil
}

// writePrivate replaces path with b, mode fileMode, through a file renamed into place, so that the
// router never reads half a file.
func writePrivate(path string, b []byte) error { return atomicfile.Write(path, b, fileMode) }

// owner is who the router runs as, which owns its configuration and socket directories so that a
// router that is not root can read the one and make its socket in the other.
type owner struct {
	set      bool
	uid, gid int
}

// parseOwner reads the router's user as the ECS agent does (ecs-agent/utils/firelens SetOwnership):
// empty: the agent's own user keeps the files; uid, uid:gid, or uid:group-name (the agent's group).
// Berth takes root as uid 0 too; any other user name is an error, as in the ECS agent.
func parseOwner(user string) (owner, error) {
	if user == "" {
		return owner{}, nil
	}
	u, g, hasGroup := strings.Cut(user, ":")
	uid, err := strconv.Atoi(u)
	if u == "root" {
		uid, err = 0, nil
	}
	if err != nil || uid < 0 {
		return owner{}, fmt.Errorf("the router's user %q: a numeric user ID is needed to give it its socket directory", user)
	}
	gid := os.Getgid()
	if hasGroup {
		if n, err := strconv.Atoi(g); err == nil && n >= 0 {
			gid = n
		}
	}
	return owner{set: true, uid: uid, gid: gid}, nil
}

// chown gives paths to the owner, when the router's user is set.
func (o owner) chown(paths ...string) error {
	if !o.set {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, o.uid, o.gid); err != nil {
			return fmt.Errorf("give %s to the router's user: %w", p, err)
		}
	}
	return nil
}
