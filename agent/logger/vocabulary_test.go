package logger_test

import (
	"fmt"
	"go/ast"
	"go/build"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The log vocabulary every call of the agent's logger follows:
//   - a key that is a constant is snake_case;
//   - an error is logged under the key "error", never "err" or anything else;
//   - every key has a value.
//
// The checker type-checks the agent's own packages from source, so it knows which calls are calls of
// *logger.Logger (and of which of its methods take key/value pairs: the ones ending in ...any), which
// keys are constants, and which values are errors. To stay fast it does not load the standard library
// or third-party packages: a value whose type comes from them is unknown, and is taken for an error by
// its shape instead: an identifier or field named err or ending in Err, or a call of Err(),
// fmt.Errorf, errors.New, errors.Join or context.Cause.

const (
	modulePath = "github.com/berth-agent/berth/"
	loggerPath = modulePath + "agent/logger"
)

// snakeCase is the shape of a log key.
var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)

// errorType is the built-in error interface.
var errorType = types.Universe.Lookup("error").Type().Underlying().(*types.Interface)

// vocabularyChecker type-checks a set of our packages (import path → parsed non-test files) and
// reports every logger call that breaks the vocabulary.
type vocabularyChecker struct {
	fset     *token.FileSet
	files    map[string][]*ast.File
	packages map[string]*types.Package
	info     *types.Info
}

// checkVocabulary returns one "file:line: problem" line per deviation, in file order, and the number
// of logger calls it checked in each package.
func checkVocabulary(fset *token.FileSet, files map[string][]*ast.File) (problems []string, calls map[string]int) {
	c := &vocabularyChecker{
		fset:     fset,
		files:    files,
		packages: map[string]*types.Package{},
		info: &types.Info{
			Types:      map[ast.Expr]types.TypeAndValue{},
			Uses:       map[*ast.Ident]types.Object{},
			Defs:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
		},
	}
	calls = map[string]int{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		if _, err := c.Import(p); err != nil {
			problems = append(problems, err.Error())
		}
		for _, f := range files[p] {
			found, n := c.checkFile(f)
			problems = append(problems, found...)
			calls[p] += n
		}
	}
	return problems, calls
}

// Import type-checks one of our packages once, after the packages it imports; any other package is an
// empty stand-in, so its names have unknown types. Type errors are expected and ignored.
func (c *vocabularyChecker) Import(importPath string) (*types.Package, error) {
	if p, ok := c.packages[importPath]; ok {
		return p, nil
	}
	stub := types.NewPackage(importPath, path.Base(importPath))
	stub.MarkComplete()
	c.packages[importPath] = stub // also breaks an import cycle, should there be one
	files, ours := c.files[importPath]
	if !ours {
		return stub, nil
	}
	conf := types.Config{Importer: c, Error: func(error) {}}
	p, _ := conf.Check(importPath, c.fset, files, c.info)
	c.packages[importPath] = p
	return p, nil
}

// checkFile reports the deviations in one file, in the order of their positions, and counts the
// logger calls in it.
func (c *vocabularyChecker) checkFile(f *ast.File) (problems []string, calls int) {
	type problem struct {
		pos token.Pos
		msg string
	}
	var found []problem
	report := func(at ast.Node, format string, args ...any) {
		found = append(found, problem{at.Pos(), fmt.Sprintf(format, args...)})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		kv, ok := c.keyValues(call)
		if !ok {
			return true
		}
		calls++
		for i := 0; i < len(kv); i += 2 {
			key, isConst := c.constantString(kv[i])
			if isConst && !snakeCase.MatchString(key) {
				report(kv[i], "log key %q is not snake_case", key)
			}
			if i+1 == len(kv) {
				report(kv[i], "log key %s has no value", types.ExprString(kv[i]))
				break
			}
			if value := kv[i+1]; c.isError(value) && (!isConst || key != "error") {
				report(kv[i], "error %s is logged under %s, want \"error\"", types.ExprString(value), types.ExprString(kv[i]))
			}
		}
		return true
	})
	slices.SortStableFunc(found, func(a, b problem) int { return int(a.pos - b.pos) })
	for _, p := range found {
		pos := c.fset.Position(p.pos)
		problems = append(problems, fmt.Sprintf("%s:%d: %s", pos.Filename, pos.Line, p.msg))
	}
	return problems, calls
}

// keyValues returns the key/value arguments of a call of a *logger.Logger method whose last parameter
// is ...any; ok is false for any other call, and for a call that forwards a slice with kv....
func (c *vocabularyChecker) keyValues(call *ast.CallExpr) (kv []ast.Expr, ok bool) {
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel || call.Ellipsis.IsValid() {
		return nil, false
	}
	selection := c.info.Selections[sel]
	if selection == nil || selection.Kind() != types.MethodVal {
		return nil, false
	}
	sig := selection.Obj().Type().(*types.Signature)
	if !sig.Variadic() || sig.Recv() == nil || !isLogger(sig.Recv().Type()) {
		return nil, false
	}
	last := sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice)
	if iface, isIface := last.Elem().Underlying().(*types.Interface); !isIface || !iface.Empty() {
		return nil, false
	}
	first := sig.Params().Len() - 1
	if len(call.Args) <= first {
		return nil, true
	}
	return call.Args[first:], true
}

// isLogger reports whether t is logger.Logger or a pointer to it.
func isLogger(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := t.(*types.Named)
	return ok && named.Obj().Name() == "Logger" && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == loggerPath
}

// constantString returns the value of a constant string expression.
func (c *vocabularyChecker) constantString(e ast.Expr) (string, bool) {
	tv, ok := c.info.Types[e]
	if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
		return "", false
	}
	return constant.StringVal(tv.Value), true
}

// isError reports whether e is an error: by its type when that is known, by its shape otherwise. An
// identifier named err is an error whatever its type.
func (c *vocabularyChecker) isError(e ast.Expr) bool {
	e = ast.Unparen(e)
	if id, ok := e.(*ast.Ident); ok && id.Name == "err" {
		return true
	}
	if tv, ok := c.info.Types[e]; ok && tv.Type != nil && tv.Type != types.Typ[types.Invalid] {
		if b, isBasic := tv.Type.(*types.Basic); isBasic && b.Kind() == types.UntypedNil {
			return false
		}
		return types.Implements(tv.Type, errorType)
	}
	return looksLikeError(e)
}

// looksLikeError judges an expression of unknown type by its shape.
func looksLikeError(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return errorName(x.Name)
	case *ast.SelectorExpr:
		return errorName(x.Sel.Name)
	case *ast.CallExpr:
		sel, ok := x.Fun.(*ast.SelectorExpr)
		if !ok {
			return false
		}
		if sel.Sel.Name == "Err" {
			return true
		}
		pkg, ok := sel.X.(*ast.Ident)
		if !ok {
			return false
		}
		switch pkg.Name + "." + sel.Sel.Name {
		case "fmt.Errorf", "errors.New", "errors.Join", "context.Cause":
			return true
		}
	}
	return false
}

// errorName reports names that hold errors by convention: err, fooErr, Err.
func errorName(name string) bool {
	return name == "err" || strings.HasSuffix(name, "Err")
}

// parseTree parses the non-test Go files of every package under root, the directory of the module's
// package rootPkg (like "agent"), keyed by import path; file names in positions are relative to the
// module root, like agent/engine/worker.go.
func parseTree(t *testing.T, fset *token.FileSet, root, rootPkg string) map[string][]*ast.File {
	t.Helper()
	files := map[string][]*ast.File{}
	err := filepath.WalkDir(root, func(dir string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "testdata" {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(dir, 0)
		if err != nil {
			return nil // no non-test Go files here
		}
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			return err
		}
		pkgPath := modulePath + path.Join(rootPkg, filepath.ToSlash(rel))
		for _, name := range append(p.GoFiles, p.CgoFiles...) {
			src, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, path.Join(rootPkg, filepath.ToSlash(rel), name), src, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files[pkgPath] = append(files[pkgPath], f)
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, files, loggerPath, "the walk did not reach agent/logger")
	return files
}

// TestLogVocabulary checks every logger call of the agent's non-test code.
func TestLogVocabulary(t *testing.T) {
	fset := token.NewFileSet()
	files := parseTree(t, fset, "..", "agent")
	problems, calls := checkVocabulary(fset, files)
	for _, problem := range problems {
		t.Error(problem)
	}
	// A package that holds a *logger.Logger and logs nowhere would mean the checker lost sight of its
	// calls (a type-check gone wrong), not that the package is clean.
	for pkgPath, pkgFiles := range files {
		if namesLoggerType(pkgFiles) && calls[pkgPath] == 0 {
			t.Errorf("%s names logger.Logger but the checker found no logger call in it", pkgPath)
		}
	}
}

// namesLoggerType reports whether one of the files spells the type logger.Logger.
func namesLoggerType(files []*ast.File) bool {
	for _, f := range files {
		for _, imp := range f.Imports {
			if imp.Path.Value != strconv.Quote(loggerPath) {
				continue
			}
			name := path.Base(loggerPath)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			found := false
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Logger" {
					if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
						found = true
					}
				}
				return !found
			})
			if found {
				return true
			}
		}
	}
	return false
}

// TestLogVocabularyCheckerFinds runs the checker on small programs, next to the real logger package,
// to show that it finds each kind of deviation and nothing else.
func TestLogVocabularyCheckerFinds(t *testing.T) {
	const header = `package snippet

import (
	"context"
	"errors"
	"fmt"

	"github.com/berth-agent/berth/agent/logger"
)

var _, _, _ = context.Cause, errors.New, fmt.Errorf

`
	tests := []struct {
		name string
		body string
		want []string // substrings of the problems, in order; none for a clean snippet
	}{
		{
			name: "snake_case keys and an error under error",
			body: `func f(log *logger.Logger, err error) {
	log.Info("started", "task_arn", "arn", "container_name2", "web")
	log.With("task", "arn").Warn("failed", "error", err)
}`,
		},
		{
			name: "camelCase key",
			body: `func f(log *logger.Logger) {
	log.Info("started", "taskArn", "arn")
}`,
			want: []string{`snippet.go:14: log key "taskArn" is not snake_case`},
		},
		{
			name: "key with a dash, an upper-case key and a leading underscore",
			body: `func f(log *logger.Logger) {
	log.Debug("x", "task-arn", 1, "Task", 2, "_task", 3)
}`,
			want: []string{`"task-arn" is not snake_case`, `"Task" is not snake_case`, `"_task" is not snake_case`},
		},
		{
			name: "named constant key",
			body: `const keyTask = "TaskARN"

func f(log *logger.Logger) {
	log.Error("x", keyTask, "arn")
}`,
			want: []string{`snippet.go:16: log key "TaskARN" is not snake_case`},
		},
		{
			name: "err under err",
			body: `func f(log *logger.Logger, err error) {
	log.Warn("failed", "err", err)
}`,
			want: []string{`error err is logged under "err", want "error"`},
		},
		{
			name: "error typed value under another key, in With and Critical",
			body: `func f(log *logger.Logger) {
	var cause error = errors.New("x")
	log.With("reason", cause).Critical("gone", "cause", cause)
}`,
			want: []string{`error cause is logged under "reason"`, `error cause is logged under "cause"`},
		},
		{
			name: "error types that are not the error interface",
			body: `type myErr struct{}

func (*myErr) Error() string { return "" }

func f(log *logger.Logger, e *myErr) {
	log.Info("x", "detail", e)
}`,
			want: []string{`error e is logged under "detail"`},
		},
		{
			name: "values of unknown type judged by shape",
			body: `func f(log *logger.Logger, ctx context.Context, r struct{ pullErr error }) {
	log.Info("x", "a", ctx.Err(), "b", fmt.Errorf("x"), "c", context.Cause(ctx), "d", r.pullErr)
}`,
			want: []string{`ctx.Err() is logged under "a"`, `is logged under "b"`, `is logged under "c"`, `r.pullErr is logged under "d"`},
		},
		{
			name: "error under a key that is not a constant",
			body: `func f(log *logger.Logger, key string, err error) {
	log.Info("x", key, err)
}`,
			want: []string{`error err is logged under key`},
		},
		{
			name: "a key without a value",
			body: `func f(log *logger.Logger) {
	log.Info("x", "task", "arn", "container")
}`,
			want: []string{`log key "container" has no value`},
		},
		{
			name: "logger reached through a field and an embedded logger",
			body: `type server struct {
	log *logger.Logger
	*logger.Logger
}

func (s *server) f() {
	s.log.Info("x", "seqNum", 1)
	s.Warn("y", "messageId", 2)
}`,
			want: []string{`"seqNum" is not snake_case`, `"messageId" is not snake_case`},
		},
		{
			name: "other types' methods of the same name and forwarded pairs are not checked",
			body: `type other struct{}

func (other) Info(msg string, kv ...any) {}

func f(log *logger.Logger, o other, kv []any, err error) {
	o.Info("x", "taskArn", err)
	log.Info("x", kv...)
	_ = err.Error()
}`,
		},
	}
	fset := token.NewFileSet()
	real := parseTree(t, fset, ".", "agent/logger")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := parser.ParseFile(fset, "snippet.go", header+tt.body, parser.SkipObjectResolution)
			require.NoError(t, err)
			files := map[string][]*ast.File{
				loggerPath:                   real[loggerPath],
				modulePath + "agent/snippet": {f},
			}
			got, _ := checkVocabulary(fset, files)
			require.Len(t, got, len(tt.want), "problems: %q", got)
			for i, want := range tt.want {
				assert.Contains(t, got[i], want)
			}
		})
	}
}
