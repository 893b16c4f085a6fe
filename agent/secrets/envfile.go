package secrets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"golang.org/x/sync/errgroup"

	"github.com/berth-agent/berth/agent/set"
)

// MaxEnvFileSize bounds an environment file (CodeEnvFileTooLarge beyond it).
const MaxEnvFileSize = 4 << 20

// KeyValue is one variable of an environment file.
type KeyValue struct{ Name, Value string }

// EnvFiles fetches the S3 objects named by arns (arn:<partition>:s3:::<bucket>/<key>) in the default
// region and parses them as ECS does. Every ARN is validated before anything is fetched. On failure
// it returns the *Error of the first file, in arns order, that failed (or a plain error when creds
// is nil or the SDK configuration does not load).
//
// Format, per line: VAR=VALUE. Lines that are blank or whose first non-blank character is '#' are
// skipped; leading blanks before VAR are dropped; VALUE is everything after the first '=', taken as
// is (no quote stripping, no escapes, may hold '='); a trailing "\r" is dropped. A line with a
// name but no value ("VAR=") is skipped, as the ECS agent does. A line without '=', with an empty
// or blank-holding VAR, or with a NUL byte is CodeMalformedEnvFile, naming the file and the line
// number (never the line).
//
// Precedence follows the ECS agent (files "processed from the top down", ECS developer guide):
// within one file a later line of a variable replaces an earlier one; across files the first file
// that sets a variable wins. The result has each variable once, in the order of its first
// appearance. Variables of the container definition's environment[] win over all of these; that
// merge is the caller's.
func (f *Fetcher) EnvFiles(ctx context.Context, creds aws.CredentialsProvider, arns []string) ([]KeyValue, error) {
	awsCfg, region, err := f.sdk(ctx, creds)
	if err != nil {
		return nil, err
	}
	type object struct{ bucket, key string }
	objects := make([]object, len(arns))
	for i, a := range arns {
		label := envFileLabel(a)
		b, k, err := s3Object(a)
		if err != nil {
			return nil, localError(label, CodeInvalidReference, err)
		}
		if region == "" {
			return nil, localError(label, CodeInvalidReference, errors.New("no default region is configured to ask S3 in"))
		}
		objects[i] = object{b, k}
	}

	client := f.s3Client(awsCfg, region, creds)
	files := make([][]KeyValue, len(arns))
	errs := make([]error, len(arns))
	var g errgroup.Group
	g.SetLimit(maxConcurrentCalls)
	for i, o := range objects {
		g.Go(func() error {
			label := envFileLabel(arns[i])
			body, err := f.getObject(ctx, client, o.bucket, o.key, label, MaxEnvFileSize, CodeEnvFileTooLarge)
			if err != nil {
				errs[i] = err
				return nil
			}
			if files[i], err = parseEnvFile(body); err != nil {
				errs[i] = localError(label, CodeMalformedEnvFile, err)
			}
			return nil
		})
	}
	_ = g.Wait() // the calls report through errs
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return mergeEnvFiles(files), nil
}

// envFileLabel names an environment file in errors.
func envFileLabel(arn string) string { return "environment file " + shown(arn) }

// getObject reads one S3 object of at most limit bytes; a larger one is the tooLarge code.
func (f *Fetcher) getObject(ctx context.Context, client *s3.Client, bucket, key, label string, limit int, tooLarge string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", awsError(label, err)
	}
	defer out.Body.Close()
	b, err := io.ReadAll(io.LimitReader(out.Body, int64(limit)+1))
	if err != nil {
		return "", awsError(label, fmt.Errorf("read the object: %w", err))
	}
	if len(b) > limit {
		return "", localError(label, tooLarge, fmt.Errorf("the object is larger than %d bytes", limit))
	}
	return string(b), nil
}

// parseEnvFile parses one environment file (see EnvFiles), returning its variables in line order,
// repeats included. Errors name the line number, never the line's text.
func parseEnvFile(body string) ([]KeyValue, error) {
	body = strings.TrimPrefix(body, "\ufeff")
	var out []KeyValue
	n := 0
	for line := range strings.Lines(body) {
		n++
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		line = strings.TrimLeft(line, " \t")
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.IndexByte(line, 0) >= 0 {
			return nil, fmt.Errorf("line %d has a NUL byte", n)
		}
		name, value, ok := strings.Cut(line, "=")
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d has no '=' (VAR=VALUE)", n)
		case name == "":
			return nil, fmt.Errorf("line %d has no variable name before '='", n)
		case strings.ContainsAny(name, " \t\v\f\r"):
			return nil, fmt.Errorf("line %d has a blank in its variable name", n)
		case value == "":
			continue // the ECS agent ignores a variable without a value
		}
		out = append(out, KeyValue{Name: name, Value: value})
	}
	return out, nil
}

// mergeEnvFiles applies the precedence of EnvFiles to the variables of each file.
func mergeEnvFiles(files [][]KeyValue) []KeyValue {
	var out []KeyValue
	pos := make(map[string]int) // name → index in out
	for _, kvs := range files {
		var fromThisFile set.Set[string]
		for _, kv := range kvs {
			i, seen := pos[kv.Name]
			switch {
			case !seen:
				pos[kv.Name] = len(out)
				fromThisFile.Add(kv.Name)
				out = append(out, kv)
			case fromThisFile.Has(kv.Name):
				out[i].Value = kv.Value // a later line of the same file wins
			}
			// otherwise an earlier file set it, and it wins
		}
	}
	return out
}
