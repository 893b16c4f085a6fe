// Command testapp is the one static binary inside the berth/testapp test image
// (FROM scratch: no shell, no curl). Berth's integration tests and examples pick
// its behaviour with a mode and flags:
//
//	testapp <mode> [flags]
//
//	sleep       [-d DURATION]                  sleep for DURATION (default 0: forever), then exit 0
//	cat                                        copy stdin to stdout until EOF, then exit 0
//	print       [-out LINE]... [-err LINE]... [-d DURATION] [-stay]
//	                                           print each -out LINE on stdout and each -err LINE on
//	                                           stderr, in the order given, then wait DURATION (or, with
//	                                           -stay, until SIGTERM) and exit 0
//	exit        [-code N] [-after DURATION]    exit with code N (0..255, default 0) after DURATION (default 0)
//	http        [-addr :8080] [-healthy-after DURATION]
//	            serve GET /        200 "testapp host=<hostname> name=<$TESTAPP_NAME>" (name= only when set)
//	                  /health  503 until -healthy-after (default 0) has elapsed since start, then 200
//	                  /env     the environment, sorted, one KEY=VALUE a line
//	                  /echo?msg=TEXT  TEXT and a newline
//	env         [-stay]                        print the environment sorted, then exit 0 (or keep running)
//	write       -path P [-content C] [-stay]   write C to P (creating parent directories), then exit 0 (or keep running)
//	read        -path P [-wait DURATION] [-until TEXT]
//	                                           wait until P exists (default 30s, 0: forever) and, with
//	                                           -until, holds TEXT; print it, exit 0; exit 1 on timeout.
//	                                           -path-env NAME instead of -path reads the path from the
//	                                           variable NAME (the image has no shell to expand $NAME)
//	ignore-term                                ignore SIGTERM and SIGINT and sleep forever: only SIGKILL stops it
//	health      [-url http://127.0.0.1:8080/health] [-timeout 3s]
//	                                           health-check client: exit 0 on HTTP 200, 1 otherwise
//	alloc       -mib N                         allocate N MiB, touching every page, and hold it until
//	                                           SIGTERM (exit 0); the kernel's OOM killer may end it first
//	connect     -addr HOST:PORT [-timeout 5s] [-read]
//	                                           TCP dial: exit 0 when it connects, 1 (error on stderr) otherwise;
//	                                           -read also requires one line from the peer and prints it
//	listen      [-addr :9000] [-msg TEXT]      accept TCP connections, answer each with one line
//	                                           (default "testapp host=<hostname>") and close it
//	aws-identity [-creds-only] [-timeout 10s]  resolve credentials with the AWS SDK's default chain (in a
//	                                           task: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, the container
//	                                           credentials provider) and print AccessKeyId= and
//	                                           CredentialsSource=; then call sts:GetCallerIdentity
//	                                           (AWS_ENDPOINT_URL_STS applies; region AWS_REGION, else
//	                                           us-east-1) and print Account= and Arn=. -creds-only stops
//	                                           after the credentials. Never prints the secret key or the
//	                                           session token. Exit 1 (error on stderr) on failure. The
//	                                           image has no CA certificates: STS must be an http:// stand-in
//	metadata    [-path P] [-timeout 5s]        GET $ECS_CONTAINER_METADATA_URI_V4, or P below it (task,
//	                                           stats, task/stats), and print the body; exit 1 (status and
//	                                           body on stderr) unless it answers 200
//	protection  [-put JSON] [-timeout 5s]      GET $ECS_AGENT_URI/task-protection/v1/state (PUT JSON to it
//	                                           with -put) and print status=CODE and the body; exit 1
//	                                           unless it answers 200
//	otel-ecs    [-timeout 10s]                 run OpenTelemetry's ECS resource detector (Go) against
//	                                           $ECS_CONTAINER_METADATA_URI_V4 and print each attribute it
//	                                           extracts as KEY=VALUE, sorted; exit 1 when it fails
//	fault       -fault F -op O [-body JSON] [-want 200] [-timeout 10s]
//	                                           POST JSON to the task's fault route F/O
//	                                           ($ECS_AGENT_URI/fault/v1/F/O, derived from
//	                                           $ECS_CONTAINER_METADATA_URI_V4 when unset) and print
//	                                           "STATUS BODY"; exit 1 unless the status is -want (0: any)
//	help                                       print this usage on stdout and exit 0
//
// Signals: in sleep, http, env -stay, write -stay and listen, SIGTERM or SIGINT
// makes testapp exit 0 at once (http shuts its server down first). exit exits with
// its code N even when signalled early; read exits 1 when signalled before the
// file appears; ignore-term ignores both.
//
// An unknown mode, a bad flag, a missing required flag or a stray argument exits 2
// with the usage on stderr. Lines about what testapp does go to stdout, errors to
// stderr, both prefixed "testapp: ".
//
// In a task definition, a health check on the http mode reads
//
//	"healthCheck": {"command": ["CMD", "/testapp", "health", "-url", "http://127.0.0.1:8080/health"]}
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

const usage = `usage: testapp <mode> [flags]

modes:
  sleep       [-d DURATION]                 sleep (default forever), exit 0; SIGTERM exits 0
  cat                                       copy stdin to stdout until EOF, exit 0
  print       [-out LINE]... [-err LINE]... [-d DURATION] [-stay]
                                            print the lines on stdout and stderr in order, wait, exit 0
  exit        [-code N] [-after DURATION]   exit with code N after DURATION
  alloc       -mib N                        allocate and touch N MiB, hold it until SIGTERM
  http        [-addr :8080] [-healthy-after DURATION]
                                            serve /, /health, /env, /echo?msg=; SIGTERM exits 0
  env         [-stay]                       print the sorted environment, exit 0 (or stay)
  write       -path P [-content C] [-stay]  write C to P, exit 0 (or stay)
  read        -path P | -path-env NAME [-wait 30s] [-until TEXT]
                                            wait for P (or the path in $NAME) to exist and hold TEXT,
                                            print it, exit 0; exit 1 on timeout
  ignore-term                               ignore SIGTERM/SIGINT, sleep forever
  health      [-url http://127.0.0.1:8080/health] [-timeout 3s]
                                            exit 0 on HTTP 200, 1 otherwise
  connect     -addr HOST:PORT [-timeout 5s] [-read]
                                            exit 0 if a TCP connection succeeds, 1 otherwise
  listen      [-addr :9000] [-msg TEXT]     answer each TCP connection with one line
  aws-identity [-creds-only] [-timeout 10s] print the AWS SDK's credentials (AccessKeyId only) and
                                            sts:GetCallerIdentity's Account and Arn; exit 1 on failure
  metadata    [-path task|stats|task/stats] [-timeout 5s]
                                            print $ECS_CONTAINER_METADATA_URI_V4[/P]; exit 1 unless 200
  protection  [-put JSON] [-timeout 5s]     print status= and the body of $ECS_AGENT_URI's task protection
                                            state (PUT JSON with -put); exit 1 unless 200
  otel-ecs    [-timeout 10s]                print what OpenTelemetry's ECS resource detector extracts
  fault       -fault F -op O [-body JSON] [-want 200] [-timeout 10s]
                                            POST to the task's fault route, print "STATUS BODY";
                                            exit 1 unless the status is -want (0: any)
  help                                      print this usage

Run "testapp <mode> -h" for a mode's flags.
`

// options holds every mode's flags; a mode only reads its own.
type options struct {
	Mode         string
	Duration     time.Duration // sleep -d; 0 is forever
	Code         int           // exit -code
	After        time.Duration // exit -after
	Addr         string        // http, connect, listen -addr
	HealthyAfter time.Duration // http -healthy-after
	Stay         bool          // env, write -stay
	Path         string        // write, read -path
	PathEnv      string        // read -path-env
	Until        string        // read -until
	Content      string        // write -content
	Wait         time.Duration // read -wait; 0 is forever
	URL          string        // health -url
	Timeout      time.Duration // health, connect, aws-identity, metadata -timeout
	Read         bool          // connect -read
	Msg          string        // listen -msg; "" is "testapp host=<hostname>"
	CredsOnly    bool          // aws-identity -creds-only
	MetaPath     string        // metadata -path
	Put          string        // protection -put
	MiB          int           // alloc -mib
	Lines        []printLine   // print -out and -err, in the order given
	Fault        string        // fault -fault
	Op           string        // fault -op
	Body         string        // fault -body
	Want         int           // fault -want; 0 is any status
}

// printLine is one line print writes: to stderr when Stderr, else to stdout.
type printLine struct {
	Stderr bool
	Text   string
}

// errUsage reports arguments that cannot be run; the message says why.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// modeFlags declares a mode's flags on fs and returns its check of the parsed
// values (nil when there is nothing to check).
var modeFlags = map[string]func(fs *flag.FlagSet, o *options) func() error{
	"sleep": func(fs *flag.FlagSet, o *options) func() error {
		fs.DurationVar(&o.Duration, "d", 0, "how long to sleep (0: forever)")
		return func() error { return nonNegative("-d", o.Duration) }
	},
	"cat": func(fs *flag.FlagSet, o *options) func() error { return nil },
	"print": func(fs *flag.FlagSet, o *options) func() error {
		fs.Func("out", "a line to print on stdout (repeatable)", func(v string) error {
			o.Lines = append(o.Lines, printLine{Text: v})
			return nil
		})
		fs.Func("err", "a line to print on stderr (repeatable)", func(v string) error {
			o.Lines = append(o.Lines, printLine{Stderr: true, Text: v})
			return nil
		})
		fs.DurationVar(&o.Duration, "d", 0, "how long to wait after printing before exiting")
		fs.BoolVar(&o.Stay, "stay", false, "keep running after printing, until SIGTERM")
		return func() error { return nonNegative("-d", o.Duration) }
	},
	"alloc": func(fs *flag.FlagSet, o *options) func() error {
		fs.IntVar(&o.MiB, "mib", 0, "MiB to allocate and touch")
		return func() error {
			if o.MiB < 1 || o.MiB > 1<<20 {
				return errUsage{fmt.Sprintf("-mib %d is outside 1..1048576", o.MiB)}
			}
			return nil
		}
	},
	"exit": func(fs *flag.FlagSet, o *options) func() error {
		fs.IntVar(&o.Code, "code", 0, "exit code, 0..255")
		fs.DurationVar(&o.After, "after", 0, "wait this long before exiting")
		return func() error {
			if o.Code < 0 || o.Code > 255 {
				return errUsage{fmt.Sprintf("-code %d is outside 0..255", o.Code)}
			}
			return nonNegative("-after", o.After)
		}
	},
	"http": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Addr, "addr", ":8080", "address to listen on")
		fs.DurationVar(&o.HealthyAfter, "healthy-after", 0, "/health answers 503 until this long after start")
		return func() error { return nonNegative("-healthy-after", o.HealthyAfter) }
	},
	"env": func(fs *flag.FlagSet, o *options) func() error {
		fs.BoolVar(&o.Stay, "stay", false, "keep running after printing, until SIGTERM")
		return nil
	},
	"write": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Path, "path", "", "file to write (required)")
		fs.StringVar(&o.Content, "content", "", "what to write")
		fs.BoolVar(&o.Stay, "stay", false, "keep running after writing, until SIGTERM")
		return func() error { return required("-path", o.Path) }
	},
	"read": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Path, "path", "", "file to wait for and print (this or -path-env is required)")
		fs.StringVar(&o.PathEnv, "path-env", "", "environment variable holding the file's path")
		fs.DurationVar(&o.Wait, "wait", 30*time.Second, "how long to wait for the file (0: forever)")
		fs.StringVar(&o.Until, "until", "", "also wait until the file holds this text")
		return func() error {
			if (o.Path == "") == (o.PathEnv == "") {
				return errUsage{"exactly one of -path and -path-env is required"}
			}
			return nonNegative("-wait", o.Wait)
		}
	},
	"ignore-term": func(fs *flag.FlagSet, o *options) func() error { return nil },
	"health": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.URL, "url", "http://127.0.0.1:8080/health", "URL to GET")
		fs.DurationVar(&o.Timeout, "timeout", 3*time.Second, "request timeout")
		return func() error {
			if err := required("-url", o.URL); err != nil {
				return err
			}
			return positive("-timeout", o.Timeout)
		}
	},
	"connect": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Addr, "addr", "", "HOST:PORT to dial (required)")
		fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "dial (and -read) timeout")
		fs.BoolVar(&o.Read, "read", false, "also read one line from the peer and print it")
		return func() error {
			if err := required("-addr", o.Addr); err != nil {
				return err
			}
			return positive("-timeout", o.Timeout)
		}
	},
	"listen": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Addr, "addr", ":9000", "address to listen on")
		fs.StringVar(&o.Msg, "msg", "", `line to answer with (default "testapp host=<hostname>")`)
		return func() error { return required("-addr", o.Addr) }
	},
	"aws-identity": func(fs *flag.FlagSet, o *options) func() error {
		fs.BoolVar(&o.CredsOnly, "creds-only", false, "only resolve the credentials and print their AccessKeyId")
		fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "time for resolving the credentials and calling STS")
		return func() error { return positive("-timeout", o.Timeout) }
	},
	"otel-ecs": func(fs *flag.FlagSet, o *options) func() error {
		fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "time for the detector")
		return func() error { return positive("-timeout", o.Timeout) }
	},
	"fault": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Fault, "fault", "", "network-blackhole-port, network-latency or network-packet-loss")
		fs.StringVar(&o.Op, "op", "", "start, stop or status")
		fs.StringVar(&o.Body, "body", "", "the JSON request body")
		fs.IntVar(&o.Want, "want", http.StatusOK, "the status to exit 0 on (0: any)")
		fs.DurationVar(&o.Timeout, "timeout", 10*time.Second, "request timeout")
		return func() error {
			if err := required("-fault", o.Fault); err != nil {
				return err
			}
			if err := required("-op", o.Op); err != nil {
				return err
			}
			return positive("-timeout", o.Timeout)
		}
	},
	"metadata": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.MetaPath, "path", "", "path below the endpoint: task, stats or task/stats (default: the container)")
		fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "request timeout")
		return func() error { return positive("-timeout", o.Timeout) }
	},
	"protection": func(fs *flag.FlagSet, o *options) func() error {
		fs.StringVar(&o.Put, "put", "", "PUT this JSON body instead of a GET")
		fs.DurationVar(&o.Timeout, "timeout", 5*time.Second, "request timeout")
		return func() error { return positive("-timeout", o.Timeout) }
	},
}

func required(name, v string) error {
	if v == "" {
		return errUsage{name + " is required"}
	}
	return nil
}

func nonNegative(name string, d time.Duration) error {
	if d < 0 {
		return errUsage{fmt.Sprintf("%s %v is negative", name, d)}
	}
	return nil
}

func positive(name string, d time.Duration) error {
	if d <= 0 {
		return errUsage{fmt.Sprintf("%s %v is not positive", name, d)}
	}
	return nil
}

// parseArgs parses the arguments after the program name. It returns
// flag.ErrHelp for help requests (a mode's -h has already printed the mode's
// flags to stderr), and an errUsage or a flag error for anything else it refuses.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	if len(args) == 0 {
		return o, errUsage{"no mode given"}
	}
	o.Mode = args[0]
	switch o.Mode {
	case "help", "-h", "-help", "--help":
		return o, flag.ErrHelp
	}
	declare, ok := modeFlags[o.Mode]
	if !ok {
		return o, errUsage{fmt.Sprintf("unknown mode %q", o.Mode)}
	}
	fs := flag.NewFlagSet("testapp "+o.Mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	check := declare(fs, &o)
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, errUsage{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if check != nil {
		if err := check(); err != nil {
			return o, err
		}
	}
	return o, nil
}

func main() {
	os.Exit(mainExit(os.Args[1:], os.Stdout, os.Stderr))
}

// mainExit runs testapp with args and returns its exit code.
func mainExit(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		if modeFlags[o.Mode] == nil { // "testapp help"; a mode's -h printed its flags
			fmt.Fprint(stdout, usage)
		}
		return 0
	case err != nil:
		var ue errUsage
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "testapp: %v\n", err)
		} // a flag error has already been printed by the flag set
		fmt.Fprint(stderr, usage)
		return 2
	}
	if o.Mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
		fmt.Fprintln(stdout, "testapp: ignoring SIGTERM and SIGINT; only SIGKILL stops me")
		for {
			time.Sleep(time.Hour)
		}
	}
	// Every other mode stops on SIGTERM or SIGINT. As PID 1 in a container an
	// unhandled signal would be ignored, so the handler is what makes stop work.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return run(ctx, o, stdout, stderr)
}

// run runs the mode in o until it finishes or ctx is cancelled (a signal) and
// returns the exit code.
func run(ctx context.Context, o options, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "testapp: %v\n", err)
		return 1
	}
	switch o.Mode {
	case "sleep":
		if o.Duration > 0 {
			fmt.Fprintf(stdout, "testapp: sleeping %v\n", o.Duration)
		} else {
			fmt.Fprintln(stdout, "testapp: sleeping until SIGTERM")
		}
		waitFor(ctx, o.Duration)
		return 0
	case "cat":
		if err := copyUntilEOF(ctx, stdout, os.Stdin); err != nil {
			return fail(err)
		}
		return 0
	case "print":
		for _, l := range o.Lines {
			w := stdout
			if l.Stderr {
				w = stderr
			}
			fmt.Fprintln(w, l.Text)
		}
		switch {
		case o.Stay:
			<-ctx.Done()
		case o.Duration > 0:
			waitFor(ctx, o.Duration)
		}
		return 0
	case "alloc":
		fmt.Fprintf(stdout, "testapp: allocating %d MiB\n", o.MiB)
		held := make([][]byte, 0, o.MiB)
		for range o.MiB {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1 // touch every page, so the memory is really used
			}
			held = append(held, b)
		}
		fmt.Fprintf(stdout, "testapp: holding %d MiB until SIGTERM\n", len(held))
		<-ctx.Done()
		return 0
	case "exit":
		if o.After > 0 {
			waitFor(ctx, o.After)
		}
		fmt.Fprintf(stdout, "testapp: exiting with code %d\n", o.Code)
		return o.Code
	case "http":
		if err := serveHTTP(ctx, o, stdout); err != nil {
			return fail(err)
		}
		return 0
	case "env":
		printEnv(stdout, os.Environ())
		if o.Stay {
			<-ctx.Done()
		}
		return 0
	case "write":
		if err := writeFile(o.Path, o.Content); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "testapp: wrote %d bytes to %s\n", len(o.Content), o.Path)
		if o.Stay {
			<-ctx.Done()
		}
		return 0
	case "read":
		path := o.Path
		if o.PathEnv != "" {
			if path = os.Getenv(o.PathEnv); path == "" {
				return fail(fmt.Errorf("$%s is not set", o.PathEnv))
			}
		}
		b, err := readWhenPresent(ctx, path, o.Until, o.Wait, 100*time.Millisecond)
		if err != nil {
			return fail(err)
		}
		stdout.Write(b)
		return 0
	case "health":
		if err := checkHealth(ctx, o.URL, o.Timeout); err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "testapp: %s is healthy\n", o.URL)
		return 0
	case "connect":
		line, err := connect(ctx, o.Addr, o.Timeout, o.Read)
		if err != nil {
			return fail(err)
		}
		fmt.Fprintf(stdout, "testapp: connected to %s\n", o.Addr)
		if o.Read {
			fmt.Fprintln(stdout, line)
		}
		return 0
	case "listen":
		ln, err := net.Listen("tcp", o.Addr)
		if err != nil {
			return fail(err)
		}
		msg := o.Msg
		if msg == "" {
			msg = "testapp host=" + hostname()
		}
		fmt.Fprintf(stdout, "testapp: listening on %s\n", ln.Addr())
		if err := answerLines(ctx, ln, msg); err != nil {
			return fail(err)
		}
		return 0
	case "aws-identity":
		if err := awsIdentity(ctx, stdout, o.CredsOnly, o.Timeout); err != nil {
			return fail(err)
		}
		return 0
	case "metadata":
		if err := getMetadata(ctx, stdout, o.MetaPath, o.Timeout); err != nil {
			return fail(err)
		}
		return 0
	case "fault":
		if err := postFault(ctx, stdout, o.Fault, o.Op, o.Body, o.Want, o.Timeout); err != nil {
			return fail(err)
		}
		return 0
	case "protection":
		if err := taskProtection(ctx, stdout, o.Put, o.Timeout); err != nil {
			return fail(err)
		}
		return 0
	case "otel-ecs":
		if err := otelECS(ctx, stdout, o.Timeout); err != nil {
			return fail(err)
		}
		return 0
	}
	return fail(fmt.Errorf("mode %q has no implementation", o.Mode))
}

// copyUntilEOF copies in to out until in ends; a signal (ctx) ends it early, with no error. What
// it copied is not prefixed: it is the caller's.
func copyUntilEOF(ctx context.Context, out io.Writer, in io.Reader) error {
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, in)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return nil
	}
}

// waitFor waits d (0: forever) or until ctx is done.
func waitFor(ctx context.Context, d time.Duration) {
	if d <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// printEnv writes environ sorted, one KEY=VALUE a line.
func printEnv(w io.Writer, environ []string) {
	env := slices.Clone(environ)
	slices.Sort(env)
	for _, kv := range env {
		fmt.Fprintln(w, kv)
	}
}

// newHandler returns the http mode's handler. /health turns healthy once
// healthyAfter has passed since start, as told by now.
func newHandler(host, name string, start time.Time, healthyAfter time.Duration, now func() time.Time) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) {
		body := "testapp host=" + host
		if name != "" {
			body += " name=" + name
		}
		fmt.Fprintln(w, body)
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		if since := now().Sub(start); since < healthyAfter {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "starting: healthy in %v\n", (healthyAfter - since).Round(time.Millisecond))
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/env", func(w http.ResponseWriter, r *http.Request) {
		printEnv(w, os.Environ())
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, r.URL.Query().Get("msg"))
	})
	return mux
}

// serveHTTP serves the http mode on o.Addr until ctx is done, then shuts down.
func serveHTTP(ctx context.Context, o options, stdout io.Writer) error {
	start := time.Now()
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           newHandler(hostname(), os.Getenv("TESTAPP_NAME"), start, o.HealthyAfter, time.Now),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(stdout, "testapp: serving HTTP on %s (healthy after %v)\n", ln.Addr(), o.HealthyAfter)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
	}
	fmt.Fprintln(stdout, "testapp: stopped serving HTTP")
	return nil
}

// writeFile writes content to path, making its directories.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Written aside and renamed over path, so that a reader polling for path never reads it empty
	// or half-written.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// readWhenPresent polls for path every poll until it can be read and holds until
// (anything when empty), wait (0: forever) has passed, or ctx is done.
func readWhenPresent(ctx context.Context, path, until string, wait, poll time.Duration) ([]byte, error) {
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(string(b), until) {
			return b, nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		select {
		case <-tick.C:
		case <-deadline:
			if err == nil {
				return nil, fmt.Errorf("%s did not hold %q within %v", path, until, wait)
			}
			return nil, fmt.Errorf("%s did not appear within %v", path, wait)
		case <-ctx.Done():
			return nil, fmt.Errorf("stopped before %s appeared", path)
		}
	}
}

// checkHealth GETs url and fails unless the answer is 200.
func checkHealth(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}

// connect dials addr over TCP within timeout; with readLine it also reads one
// line from the peer within the same timeout and returns it without its newline.
func connect(ctx context.Context, addr string, timeout time.Duration, readLine bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if !readLine {
		return "", nil
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil && (line == "" || !errors.Is(err, io.EOF)) {
		return "", fmt.Errorf("connected to %s but read no line: %w", addr, err)
	}
	return strings.TrimRight(line, "\r\n"), nil
}

// answerLines answers every connection on ln with msg and a newline, then
// closes it, until ctx is done; it closes ln.
func answerLines(ctx context.Context, ln net.Listener, msg string) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		go func() {
			defer conn.Close()
			conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintln(conn, msg)
		}()
	}
}
