package agent_test

import (
	"bufio"
	"go/build"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/berth-agent/berth/"

// layoutRow matches a row of the README's Layout table: | `agent/x` | job | `a`, `b` |
var layoutRow = regexp.MustCompile("^\\| `(agent/[a-z0-9/]+)` \\| [^|]+ \\| ([^|]+) \\|$")

// readLayout returns the README's Layout table: each package with the packages it may import.
func readLayout(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layout := map[string][]string{}
	inLayout := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			inLayout = line == "## Layout"
			continue
		}
		m := layoutRow.FindStringSubmatch(line)
		if !inLayout || m == nil {
			continue
		}
		var allowed []string
		for _, name := range strings.Split(m[2], ",") {
			if name = strings.Trim(strings.TrimSpace(name), "`"); name != "—" {
				allowed = append(allowed, "agent/"+name)
			}
		}
		layout[m[1]] = allowed
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(layout) == 0 {
		t.Fatal("README.md has no Layout table")
	}
	return layout
}

// TestLayout keeps the README's Layout true: every package of the agent is in it, every package in it
// exists, and no package imports one of ours that its row does not allow.
func TestLayout(t *testing.T) {
	layout := readLayout(t)
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no non-test Go files here
		}
		name := filepath.ToSlash(filepath.Join("agent", path))
		if name == "agent" {
			return nil
		}
		pkgs = append(pkgs, name)
		allowed, listed := layout[name]
		if !listed {
			t.Errorf("%s is not in the README's Layout table", name)
			return nil
		}
		for _, imp := range p.Imports {
			ours, ok := strings.CutPrefix(imp, module)
			if ok && !slices.Contains(allowed, ours) {
				t.Errorf("%s imports %s, which the README's Layout does not allow", name, ours)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range layout {
		if !slices.Contains(pkgs, name) {
			t.Errorf("the README's Layout lists %s, which does not exist", name)
		}
	}
}

// TestLayoutHasNoCycle checks that the allowed imports order the packages: nothing may import, even
// through others, a package that may import it.
func TestLayoutHasNoCycle(t *testing.T) {
	layout := readLayout(t)
	const (
		unseen = iota
		visiting
		done
	)
	mark := map[string]int{}
	var visit func(name string, path []string)
	visit = func(name string, path []string) {
		switch mark[name] {
		case visiting:
			t.Errorf("the Layout allows a cycle: %s", strings.Join(append(path, name), " → "))
			return
		case done:
			return
		}
		mark[name] = visiting
		for _, dep := range layout[name] {
			visit(dep, append(path, name))
		}
		mark[name] = done
	}
	for name := range layout {
		visit(name, nil)
	}
}
