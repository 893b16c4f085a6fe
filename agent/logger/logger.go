// Package logger is the agent's structured logger. It renders each record as
// one logfmt or JSON line and hands the finished line to a seelog logger
// instance, which filters by level and writes to the console and,
// optionally, to a (rolling) log file.
//
// Writes are synchronous: seelog runs in "sync" mode, so by the time a
// logging call returns its line has been handed to the console writer and
// to the file (an unbuffered *os.File). Flush therefore only matters for
// console writers that buffer themselves.
package logger

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cihub/seelog"
	"github.com/jonboulle/clockwork"

	"github.com/berth-agent/berth/agent/errdefs"
)

// Accepted values for Config.Level.
const (
	LevelDebug = "debug"
	LevelInfo  = "info"
	LevelWarn  = "warn"
	LevelError = "error"
	LevelCrit  = "crit"
)

// Accepted values for Config.RolloverType.
const (
	RolloverSize = "size"
	RolloverDate = "date"
	RolloverNone = "none"
)

// Accepted values for Config.OutputFormat.
const (
	FormatLogfmt = "logfmt"
	FormatJSON   = "json"
)

// Defaults applied by New to zero-valued Config fields.
const (
	DefaultLevel         = LevelInfo
	DefaultRolloverType  = RolloverDate
	DefaultMaxFileSizeMB = 10.0
	DefaultMaxRollCount  = 24
	DefaultOutputFormat  = FormatLogfmt
)

// DatePattern is the Go time layout used to suffix hourly rolled files.
const DatePattern = "2006-01-02-15"

// TimeLayout is the layout of the time field in every record (UTC, milliseconds).
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// ErrInvalidConfig is wrapped by every error New returns for a bad Config value. An
// errdefs.ErrInvalidArgument.
var ErrInvalidConfig = errdefs.New(errdefs.ErrInvalidArgument, "invalid logger config")

// Config selects the level, destinations, rollover and format of a Logger.
// Zero-valued fields take the Default* values.
type Config struct {
	Level         string  // debug|info|warn|error|crit (ECS_LOGLEVEL, default info)
	File          string  // ECS_LOGFILE; empty = no file, console only
	RolloverType  string  // size|date|none (ECS_LOG_ROLLOVER_TYPE, default date)
	MaxFileSizeMB float64 // ECS_LOG_MAX_FILE_SIZE_MB (default 10), used when RolloverType=size
	MaxRollCount  int     // ECS_LOG_MAX_ROLL_COUNT (default 24), rolled files kept for size and date
	OutputFormat  string  // logfmt|json (ECS_LOG_OUTPUT_FORMAT, default logfmt)
}

// level is a record severity; the order matches seelog's levels.
type level int

const (
	debugLevel level = iota
	infoLevel
	warnLevel
	errorLevel
	critLevel
	offLevel
)

// name is the level's spelling in output and in Config.Level.
func (v level) name() string {
	switch v {
	case debugLevel:
		return LevelDebug
	case infoLevel:
		return LevelInfo
	case warnLevel:
		return LevelWarn
	case errorLevel:
		return LevelError
	case critLevel:
		return LevelCrit
	}
	return "off"
}

// seelogName is the level's spelling in seelog's minlevel attribute.
func (v level) seelogName() string {
	if v == critLevel {
		return seelog.CriticalStr
	}
	return v.name()
}

// parseLevel maps a level name (case-insensitive; "critical" is accepted for crit).
func parseLevel(s string) (level, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case LevelDebug:
		return debugLevel, true
	case LevelInfo:
		return infoLevel, true
	case LevelWarn:
		return warnLevel, true
	case LevelError:
		return errorLevel, true
	case LevelCrit, seelog.CriticalStr:
		return critLevel, true
	}
	return 0, false
}

// settings is a validated, normalised Config.
type settings struct {
	min      level
	file     string // absolute path or empty
	rollover string
	maxBytes int64
	maxRolls int
	format   string
}

// validate applies defaults and checks every field, naming the bad one.
func (c Config) validate() (settings, error) {
	var s settings
	if c.Level == "" {
		c.Level = DefaultLevel
	}
	lvl, ok := parseLevel(c.Level)
	if !ok {
		return s, fmt.Errorf("logger config: %w: Level %q (want debug, info, warn, error or crit)", ErrInvalidConfig, c.Level)
	}
	s.min = lvl

	s.rollover = strings.ToLower(strings.TrimSpace(c.RolloverType))
	if s.rollover == "" {
		s.rollover = DefaultRolloverType
	}
	switch s.rollover {
	case RolloverSize, RolloverDate, RolloverNone:
	default:
		return s, fmt.Errorf("logger config: %w: RolloverType %q (want size, date or none)", ErrInvalidConfig, c.RolloverType)
	}

	s.format = strings.ToLower(strings.TrimSpace(c.OutputFormat))
	if s.format == "" {
		s.format = DefaultOutputFormat
	}
	switch s.format {
	case FormatLogfmt, FormatJSON:
	default:
		return s, fmt.Errorf("logger config: %w: OutputFormat %q (want logfmt or json)", ErrInvalidConfig, c.OutputFormat)
	}

	mb := c.MaxFileSizeMB
	if mb == 0 {
		mb = DefaultMaxFileSizeMB
	}
	if math.IsNaN(mb) || math.IsInf(mb, 0) || mb < 0 {
		return s, fmt.Errorf("logger config: %w: MaxFileSizeMB %v (want a positive number)", ErrInvalidConfig, c.MaxFileSizeMB)
	}
	// A float too large for an int64 converts to an unspecified value (math.MinInt64 on amd64, which
	// rolled the log at every line): refuse it instead.
	if mb*1024*1024 >= math.MaxInt64 {
		return s, fmt.Errorf("logger config: %w: MaxFileSizeMB %v (want at most %d)", ErrInvalidConfig, c.MaxFileSizeMB, math.MaxInt64>>20)
	}
	s.maxBytes = max(int64(mb*1024*1024), 1)

	switch {
	case c.MaxRollCount < 0:
		return s, fmt.Errorf("logger config: %w: MaxRollCount %d (want a positive number)", ErrInvalidConfig, c.MaxRollCount)
	case c.MaxRollCount == 0:
		s.maxRolls = DefaultMaxRollCount
	default:
		s.maxRolls = c.MaxRollCount
	}

	if strings.TrimSpace(c.File) != "" {
		abs, err := filepath.Abs(c.File)
		if err != nil {
			return s, fmt.Errorf("logger config: File %q: %w", c.File, err)
		}
		s.file = abs
	}
	return s, nil
}

// core is the state shared by a Logger and all children derived with With.
type core struct {
	sl        seelog.LoggerInterface // nil for Nop
	min       level
	json      bool
	clock     clockwork.Clock // stamps records
	closeOnce sync.Once
}

// Logger writes structured records; it is safe for concurrent use, and a nil
// *Logger discards everything.
type Logger struct {
	core   *core
	fields []field
}

// New builds a Logger writing to console (nil means no console output) and,
// when cfg.File is set, also to that file, creating its directory if missing.
func New(cfg Config, console io.Writer) (*Logger, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if console == nil {
		console = io.Discard
	}
	if s.file != "" {
		if err := prepareFile(s.file); err != nil {
			return nil, err
		}
	}
	sl, err := newSeelog(s, console)
	if err != nil {
		return nil, err
	}
	return &Logger{core: &core{
		sl:    sl,
		min:   s.min,
		json:  s.format == FormatJSON,
		clock: clockwork.NewRealClock(),
	}}, nil
}

// logFileMode is the most a log file may allow: logs can name tasks, images and hosts, so only root
// and the file's group read them. Rolled files get it from the agent's umask (see cmd/berth).
const logFileMode = 0o640

// prepareFile creates the log file's directory and checks the file can be
// opened for appending, so permission problems surface from New. A file
// that allows more than logFileMode is narrowed to it.
func prepareFile(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("create log directory %q: %w", dir, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, logFileMode)
	if err != nil {
		return fmt.Errorf("open log file %q: %w", path, err)
	}
	if info, err := f.Stat(); err == nil && info.Mode().Perm()&^logFileMode != 0 {
		if err := f.Chmod(info.Mode().Perm() & logFileMode); err != nil {
			_ = f.Close()
			return fmt.Errorf("narrow log file %q to %o: %w", path, logFileMode, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close log file %q: %w", path, err)
	}
	return nil
}

// Nop returns a logger that discards everything.
func Nop() *Logger {
	return &Logger{core: &core{min: offLevel, clock: clockwork.NewRealClock()}}
}

// With returns a child carrying the extra key/value fields; l is not modified.
// A key already present takes the new value in place.
func (l *Logger) With(kv ...any) *Logger {
	if l == nil {
		return nil
	}
	return &Logger{core: l.core, fields: mergeFields(l.fields, kv)}
}

// Enabled reports whether records at the named level would be written.
func (l *Logger) Enabled(levelName string) bool {
	lvl, ok := parseLevel(levelName)
	return ok && l.enabled(lvl)
}

// Debug writes msg and the key/value fields at debug level.
func (l *Logger) Debug(msg string, kv ...any) { l.log(debugLevel, msg, kv) }

// Info writes msg and the key/value fields at info level.
func (l *Logger) Info(msg string, kv ...any) { l.log(infoLevel, msg, kv) }

// Warn writes msg and the key/value fields at warn level.
func (l *Logger) Warn(msg string, kv ...any) { l.log(warnLevel, msg, kv) }

// Error writes msg and the key/value fields at error level.
func (l *Logger) Error(msg string, kv ...any) { l.log(errorLevel, msg, kv) }

// Critical writes msg and the key/value fields at crit level and flushes.
func (l *Logger) Critical(msg string, kv ...any) { l.log(critLevel, msg, kv) }

// Flush flushes buffered output of all writers; a no-op after Close.
func (l *Logger) Flush() {
	if l == nil || l.core == nil || l.core.sl == nil {
		return
	}
	l.core.sl.Flush()
}

// Close flushes and closes the writers (never the console writer itself);
// it is idempotent and closes the parent and all children alike.
func (l *Logger) Close() {
	if l == nil || l.core == nil || l.core.sl == nil {
		return
	}
	l.core.closeOnce.Do(l.core.sl.Close)
}

func (l *Logger) enabled(lvl level) bool {
	return l != nil && l.core != nil && l.core.sl != nil && lvl >= l.core.min && !l.core.sl.Closed()
}

func (l *Logger) log(lvl level, msg string, kv []any) {
	if !l.enabled(lvl) {
		return
	}
	fields := l.fields
	if len(kv) > 0 {
		fields = mergeFields(fields, kv)
	}
	var line []byte
	if l.core.json {
		line = appendJSON(make([]byte, 0, 256), lvl, l.core.clock.Now(), msg, fields)
	} else {
		line = appendLogfmt(make([]byte, 0, 256), lvl, l.core.clock.Now(), msg, fields)
	}
	s := string(line)
	sl := l.core.sl
	switch lvl {
	case debugLevel:
		sl.Debug(s)
	case infoLevel:
		sl.Info(s)
	case warnLevel:
		_ = sl.Warn(s) // seelog returns the message as an error; nothing to handle
	case errorLevel:
		_ = sl.Error(s)
	case critLevel:
		_ = sl.Critical(s)
	}
}
