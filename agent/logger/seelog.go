package logger

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/cihub/seelog"
)

// consoleReceiverName names the per-parse custom receiver that writes to the
// caller's console writer; it is registered only in this parse's
// CfgParseParams, never globally.
const consoleReceiverName = "berthconsole"

// newSeelog builds a private, synchronous seelog logger for s whose only
// format is "%Msg%n": lines arrive fully rendered.
//
// File naming (from seelog's rollingfile writer source): both the size and
// the date roller write to exactly the configured filename and, on roll,
// rename it to "<filename>.<N>" (size) or "<filename>.<DatePattern>" (date,
// postfix name mode); only the date roller's fullname="true" would put the
// date on the current file, so fullname is set to false.
func newSeelog(s settings, console io.Writer) (seelog.LoggerInterface, error) {
	params := &seelog.CfgParseParams{
		CustomReceiverProducers: map[string]seelog.CustomReceiverProducer{
			consoleReceiverName: func(seelog.CustomReceiverInitArgs) (seelog.CustomReceiver, error) {
				return &consoleReceiver{w: console}, nil
			},
		},
	}
	sl, err := seelog.LoggerFromParamConfigAsString(seelogConfig(s), params)
	if err != nil {
		return nil, fmt.Errorf("build seelog logger: %w", err)
	}
	return sl, nil
}

// seelogConfig renders the seelog XML configuration for s.
func seelogConfig(s settings) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<seelog type="sync" minlevel=%s>`, attr(s.min.seelogName()))
	b.WriteString(`<outputs formatid="line">`)
	fmt.Fprintf(&b, `<custom name=%s/>`, attr(consoleReceiverName))
	if s.file != "" {
		switch s.rollover {
		case RolloverSize:
			fmt.Fprintf(&b, `<rollingfile type="size" filename=%s maxsize=%s maxrolls=%s archivetype="none" namemode="postfix"/>`,
				attr(s.file), attr(strconv.FormatInt(s.maxBytes, 10)), attr(strconv.Itoa(s.maxRolls)))
		case RolloverDate:
			fmt.Fprintf(&b, `<rollingfile type="date" filename=%s datepattern=%s maxrolls=%s archivetype="none" namemode="postfix" fullname="false"/>`,
				attr(s.file), attr(DatePattern), attr(strconv.Itoa(s.maxRolls)))
		default:
			fmt.Fprintf(&b, `<file path=%s/>`, attr(s.file))
		}
	}
	b.WriteString(`</outputs>`)
	b.WriteString(`<formats><format id="line" format="%Msg%n"/></formats>`)
	b.WriteString(`</seelog>`)
	return b.String()
}

// attr returns v as a double-quoted, XML-escaped attribute value.
func attr(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	_ = xml.EscapeText(&b, []byte(v)) // strings.Builder never fails
	b.WriteByte('"')
	return b.String()
}

// consoleReceiver is a seelog custom receiver writing finished lines to w.
type consoleReceiver struct {
	w io.Writer
}

// ReceiveMessage writes the already formatted line to the console writer.
func (r *consoleReceiver) ReceiveMessage(msg string, _ seelog.LogLevel, _ seelog.LogContextInterface) error {
	if _, err := io.WriteString(r.w, msg); err != nil {
		return fmt.Errorf("write console log: %w", err)
	}
	return nil
}

// AfterParse accepts the receiver as configured; it needs no attributes.
func (r *consoleReceiver) AfterParse(seelog.CustomReceiverInitArgs) error { return nil }

// Flush flushes the console writer when it buffers (has Flush() error).
func (r *consoleReceiver) Flush() {
	if f, ok := r.w.(interface{ Flush() error }); ok {
		_ = f.Flush()
	}
}

// Close flushes but does not close the console writer, which the caller owns.
func (r *consoleReceiver) Close() error {
	r.Flush()
	return nil
}
