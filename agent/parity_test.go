package agent_test

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// parityWires are the wires docs/parity must cover, one file each.
var parityWires = []string{"ACS", "TCS", "ECS-API", "TASK-METADATA", "CREDENTIALS", "INTROSPECTION", "FIRELENS"}

var (
	testFunc   = regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]*)\(`)
	heldByName = regexp.MustCompile("`(Test[A-Za-z0-9_]*)`")
)

// parityRow is one row of a parity table, with where it is.
type parityRow struct {
	where string // file:line
	table int    // which table of its file, from 1
	cells []string
}

// splitRow splits a Markdown table row into its trimmed cells; `\|` stays inside a cell.
func splitRow(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteByte('|')
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// readParity returns the rows of every parity table in a file: a table whose header ends with the
// columns "same?" and "held by".
func readParity(t *testing.T, path string) []parityRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []parityRow
	var header []string
	tables := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !strings.HasPrefix(strings.TrimSpace(line), "|") {
			header = nil
			continue
		}
		cells := splitRow(line)
		switch {
		case header == nil:
			if len(cells) >= 3 && cells[len(cells)-2] == "same?" && cells[len(cells)-1] == "held by" {
				header = cells
				tables++
			} else {
				header = []string{} // another kind of table: skipped to its end
			}
		case len(header) == 0 || strings.Trim(strings.Join(cells, ""), "-: ") == "":
		default:
			rows = append(rows, parityRow{where: path + ":" + strconv.Itoa(n), table: tables, cells: cells})
			if len(cells) != len(header) {
				t.Errorf("%s: %d cells, the table has %d columns", rows[len(rows)-1].where, len(cells), len(header))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// repoTests returns the name of every test function in the repository's *_test.go files.
func repoTests(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".run" || d.Name() == "node_modules" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestParityTables keeps docs/parity honest: every wire has its file with at least one table; every
// table names the ECS agent source it was read from (in backquotes, in its ECS agent column; a row
// may say the ECS agent has no such thing); and every row says "same" or "not same: <why>" and is
// held by tests that exist.
func TestParityTables(t *testing.T) {
	tests := repoTests(t)
	for _, wire := range parityWires {
		path := filepath.Join("..", "docs", "parity", wire+".md")
		rows := readParity(t, path)
		if len(rows) == 0 {
			t.Errorf("%s: no parity table (columns ending with \"same?\" and \"held by\")", path)
		}
		cited := map[int]bool{}
		for _, r := range rows {
			if len(r.cells) > 1 && strings.Contains(r.cells[1], "`") {
				cited[r.table] = true
			}
		}
		for _, r := range rows {
			if !cited[r.table] {
				t.Errorf("%s: no row of this table names the ECS agent source it was read from", r.where)
				cited[r.table] = true // once per table
			}
		}
		for _, r := range rows {
			n := len(r.cells)
			if n < 5 {
				continue // reported by readParity
			}
			same, heldBy := r.cells[n-2], r.cells[n-1]
			if same != "same" && !(strings.HasPrefix(same, "not same: ") && len(strings.TrimSpace(strings.TrimPrefix(same, "not same: "))) > 0) {
				t.Errorf("%s: \"same?\" is %q; want \"same\" or \"not same: <why>\"", r.where, same)
			}
			names := heldByName.FindAllStringSubmatch(heldBy, -1)
			if len(names) == 0 {
				t.Errorf("%s: held by no test: %q", r.where, heldBy)
			}
			for _, m := range names {
				if !tests[m[1]] {
					t.Errorf("%s: held by %s, which is no test function in the repository", r.where, m[1])
				}
			}
		}
	}
}
