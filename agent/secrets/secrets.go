// Package secrets fetches, for one container of a task, what Amazon ECS would inject into it from
// AWS: the values of its secrets (secrets[] and logConfiguration.secretOptions[], from SSM Parameter
// Store or Secrets Manager), its environment files (environmentFiles[], from S3) and its private
// registry credentials (repositoryCredentials, from Secrets Manager). Every request is signed with
// the credentials the caller passes: the task's execution-role credentials.
//
// # Secret values
//
// Nothing here logs, and no error holds a secret value. Failures are *Error, which names the
// secret (`secret DB_PASS (valueFrom /app/db)`), the environment file or the credentials parameter,
// with AWS's error code or one of this package's Code constants; a failure AWS answered also
// matches its errdefs class (agent/awserr), and Retry says whether asking again may help. The SDK
// clients built here have their logger replaced by a no-op and request logging off, so SDK logging
// configured elsewhere cannot print a value either.
//
// # Endpoints
//
// Clients are built from the AWS SDK's configuration (Config.AWSConfig, or the SDK's default
// configuration, loaded on first use), so AWS_ENDPOINT_URL_SSM, AWS_ENDPOINT_URL_SECRETS_MANAGER,
// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL and the shared config's endpoint_url apply; set them before
// the first call. When S3's endpoint is overridden, S3 is addressed path-style
// (<endpoint>/<bucket>/<key>), which local stand-ins (secretstest, MinIO, LocalStack) need; AWS's
// own S3 endpoints are addressed virtual-hosted style.
//
// # Calls
//
// SSM parameters are fetched with GetParameters, up to 10 names a call, with decryption, one batch
// per region. Secrets Manager secrets are fetched with GetSecretValue, once per distinct secret,
// version stage and version ID. Environment files are fetched with S3 GetObject in the default
// region. Each call is bounded by Config.CallTimeout, covering the SDK's standard retries (at most
// three attempts; throttling, 5xx answers and transport failures are retried). Up to eight calls
// of one Resolve or EnvFiles run at once.
package secrets

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsretry "github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go/logging"
	"golang.org/x/sync/errgroup"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/set"
)

// DefaultCallTimeout bounds each AWS call, retries included, when Config.CallTimeout is zero.
const DefaultCallTimeout = 30 * time.Second

const (
	// maxNamesPerCall is the most names GetParameters accepts.
	maxNamesPerCall = 10
	// maxConcurrentCalls bounds the AWS calls one Resolve or EnvFiles makes at once.
	maxConcurrentCalls = 8
	// maxAttempts is the SDK retryer's attempts per call.
	maxAttempts = 3
)

// Config is what a Fetcher needs. Zero values take the defaults.
type Config struct {
	// Region is the default region: the host's or the task's. Empty: the SDK configuration's.
	Region string
	// HTTPClient, when set, sends every request.
	HTTPClient aws.HTTPClient
	// AWSConfig, when set, is the SDK configuration clients are built from (its credentials are
	// never used). Nil: the SDK's default configuration (environment, shared files), loaded on the
	// first call; a failed load is tried again on the next call.
	AWSConfig *aws.Config
	// CallTimeout bounds each AWS call, retries included (default DefaultCallTimeout).
	CallTimeout time.Duration
	// Backoff spaces the SDK's retries; nil is the SDK's standard exponential backoff with
	// jitter. Tests pass a short one.
	Backoff awsretry.BackoffDelayer
}

// Fetcher fetches secrets, environment files and registry credentials with credentials given per
// call. It is safe for concurrent use and holds no secret.
type Fetcher struct {
	cfg Config

	mu     sync.Mutex
	awsCfg *aws.Config // nil until loaded
}

// New returns a Fetcher. It does no I/O: the SDK configuration is loaded on the first call. The
// error says what in cfg is invalid.
func New(cfg Config) (*Fetcher, error) {
	if cfg.Region != "" {
		if err := checkRegion("Config.Region", cfg.Region); err != nil {
			return nil, fmt.Errorf("secrets: %w: %w", err, errdefs.ErrInvalidArgument)
		}
	}
	if cfg.CallTimeout < 0 {
		return nil, fmt.Errorf("secrets: negative Config.CallTimeout: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	f := &Fetcher{cfg: cfg}
	if cfg.AWSConfig != nil {
		c := cfg.AWSConfig.Copy()
		f.awsCfg = &c
	}
	return f, nil
}

// sdk returns the SDK configuration, loading it the first time, and the default region ("" when
// neither Config nor the SDK names one).
func (f *Fetcher) sdk(ctx context.Context, creds aws.CredentialsProvider) (aws.Config, string, error) {
	if creds == nil {
		return aws.Config{}, "", fmt.Errorf("secrets: no credentials given: %w", errdefs.ErrInvalidArgument)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.awsCfg == nil {
		c, err := awsconfig.LoadDefaultConfig(ctx)
		if err != nil {
			return aws.Config{}, "", fmt.Errorf("secrets: load AWS SDK configuration: %w", err)
		}
		f.awsCfg = &c
	}
	region := f.cfg.Region
	if region == "" {
		region = f.awsCfg.Region
	}
	return *f.awsCfg, region, nil
}

// retryer is the SDK's standard retryer with at most maxAttempts attempts.
func (f *Fetcher) retryer() aws.Retryer {
	return awsretry.NewStandard(func(o *awsretry.StandardOptions) {
		o.MaxAttempts = maxAttempts
		if f.cfg.Backoff != nil {
			o.Backoff = f.cfg.Backoff
		}
	})
}

func (f *Fetcher) ssmClient(awsCfg aws.Config, region string, creds aws.CredentialsProvider) *ssm.Client {
	return ssm.NewFromConfig(awsCfg, func(o *ssm.Options) {
		o.Region, o.Credentials = region, creds
		o.Retryer, o.RetryMaxAttempts = f.retryer(), 0
		o.Logger, o.ClientLogMode = logging.Nop{}, 0
		if f.cfg.HTTPClient != nil {
			o.HTTPClient = f.cfg.HTTPClient
		}
	})
}

func (f *Fetcher) asmClient(awsCfg aws.Config, region string, creds aws.CredentialsProvider) *secretsmanager.Client {
	return secretsmanager.NewFromConfig(awsCfg, func(o *secretsmanager.Options) {
		o.Region, o.Credentials = region, creds
		o.Retryer, o.RetryMaxAttempts = f.retryer(), 0
		o.Logger, o.ClientLogMode = logging.Nop{}, 0
		if f.cfg.HTTPClient != nil {
			o.HTTPClient = f.cfg.HTTPClient
		}
	})
}

// s3Client addresses S3 path-style when its endpoint is overridden (BaseEndpoint is set by then
// from AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the shared config or aws.Config).
func (f *Fetcher) s3Client(awsCfg aws.Config, region string, creds aws.CredentialsProvider) *s3.Client {
	return s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		o.Region, o.Credentials = region, creds
		o.Retryer, o.RetryMaxAttempts = f.retryer(), 0
		o.Logger, o.ClientLogMode = logging.Nop{}, 0
		o.DisableLogOutputChecksumValidationSkipped = true
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
		if f.cfg.HTTPClient != nil {
			o.HTTPClient = f.cfg.HTTPClient
		}
	})
}

// Resolve fetches the value of every ref with creds and returns them by Ref.Name. Every ref is
// validated before anything is fetched. On failure it returns no values and the *Error of the first
// ref, in refs order, that failed (or a plain error when creds is nil or the SDK configuration does
// not load). Two refs of one Name are an error (CodeDuplicateName); two refs of one valueFrom are
// fetched once.
//
// SSM: a missing parameter is CodeParameterNotFound. Secrets Manager: the value is the
// SecretString; with a json-key, the SecretString must be a JSON object whose member of that name
// is a string (CodeNotJSONObject, CodeJSONKeyNotFound, CodeJSONKeyNotString), and that string is
// the value.
func (f *Fetcher) Resolve(ctx context.Context, creds aws.CredentialsProvider, refs []Ref) (map[string]string, error) {
	awsCfg, defaultRegion, err := f.sdk(ctx, creds)
	if err != nil {
		return nil, err
	}
	targets := make([]target, len(refs))
	var names set.Set[string]
	for i, r := range refs {
		if targets[i], err = parseRef(r, defaultRegion); err != nil {
			return nil, err
		}
		if names.Has(r.Name) {
			return nil, localError(targets[i].label, CodeDuplicateName, errors.New("an earlier secret has the same name"))
		}
		names.Add(r.Name)
	}

	values := make([]string, len(refs))
	errs := make([]error, len(refs))
	var g errgroup.Group
	g.SetLimit(maxConcurrentCalls)

	// SSM: distinct valueFroms per region, in batches.
	type ssmKey struct{ region, name string }
	ssmRefs := make(map[ssmKey][]int)
	var ssmOrder []ssmKey
	// Secrets Manager: one call per distinct request.
	type asmKey struct{ region, secretID, stage, versionID string }
	asmRefs := make(map[asmKey][]int)
	var asmOrder []asmKey
	for i, t := range targets {
		if t.provider == ProviderSSM {
			k := ssmKey{t.region, refs[i].ValueFrom}
			if ssmRefs[k] == nil {
				ssmOrder = append(ssmOrder, k)
			}
			ssmRefs[k] = append(ssmRefs[k], i)
			continue
		}
		k := asmKey{t.region, t.asm.secretID, t.asm.stage, t.asm.versionID}
		if asmRefs[k] == nil {
			asmOrder = append(asmOrder, k)
		}
		asmRefs[k] = append(asmRefs[k], i)
	}

	batches := make(map[string][]string) // region → names
	var regions []string
	for _, k := range ssmOrder {
		if batches[k.region] == nil {
			regions = append(regions, k.region)
		}
		batches[k.region] = append(batches[k.region], k.name)
	}
	for _, region := range regions {
		all := batches[region]
		for len(all) > 0 {
			batch := all[:min(len(all), maxNamesPerCall)]
			all = all[len(batch):]
			byName := make(map[string][]int, len(batch))
			for _, n := range batch {
				byName[n] = ssmRefs[ssmKey{region, n}]
			}
			g.Go(func() error {
				f.getParameters(ctx, f.ssmClient(awsCfg, region, creds), batch, byName, targets, values, errs)
				return nil
			})
		}
	}
	for _, k := range asmOrder {
		idx := asmRefs[k]
		g.Go(func() error {
			f.getSecret(ctx, f.asmClient(awsCfg, k.region, creds), idx, targets, values, errs)
			return nil
		})
	}
	_ = g.Wait() // the calls report through errs

	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	out := make(map[string]string, len(refs))
	for i, r := range refs {
		out[r.Name] = values[i]
	}
	return out, nil
}

// getParameters fetches one batch of SSM names; byName gives the refs of each name. It writes
// values[i] or errs[i] of each of those refs.
func (f *Fetcher) getParameters(ctx context.Context, client *ssm.Client, names []string, byName map[string][]int, targets []target, values []string, errs []error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	out, err := client.GetParameters(ctx, &ssm.GetParametersInput{Names: names, WithDecryption: aws.Bool(true)})
	if err != nil {
		for _, idx := range byName {
			for _, i := range idx {
				errs[i] = awsError(targets[i].label, err)
			}
		}
		return
	}
	// A parameter is matched by the name or ARN it was asked by, with its selector (":3",
	// ":label") when it was asked with one.
	found := make(map[string]string, 2*len(out.Parameters))
	for _, p := range out.Parameters {
		sel := aws.ToString(p.Selector)
		if sel != "" && sel[0] != ':' {
			sel = ":" + sel
		}
		for _, k := range []string{aws.ToString(p.Name), aws.ToString(p.ARN)} {
			if k != "" {
				found[k+sel] = aws.ToString(p.Value)
			}
		}
	}
	invalid := set.Of(out.InvalidParameters...)
	for name, idx := range byName {
		v, ok := found[name]
		for _, i := range idx {
			switch {
			case ok:
				values[i] = v
			case invalid.Has(name):
				errs[i] = localError(targets[i].label, CodeParameterNotFound, errors.New("SSM has no such parameter (or version or label) in region "+targets[i].region))
			default:
				errs[i] = localError(targets[i].label, CodeMissingFromResponse, errors.New("SSM answered without the parameter"))
			}
		}
	}
}

// getSecret fetches one Secrets Manager secret version for the refs idx, all asking the same
// one, and writes values[i] or errs[i] of each.
func (f *Fetcher) getSecret(ctx context.Context, client *secretsmanager.Client, idx []int, targets []target, values []string, errs []error) {
	s, serr := f.secretString(ctx, client, targets[idx[0]].asm)
	for _, i := range idx {
		t := targets[i]
		if serr != nil {
			e := *serr
			e.Secret = t.label
			errs[i] = &e
			continue
		}
		if t.asm.jsonKey == "" {
			values[i] = s
			continue
		}
		obj, err := jsonObject(t.label, s)
		if err == nil {
			values[i], err = jsonString(t.label, obj, t.asm.jsonKey, CodeJSONKeyNotFound, CodeJSONKeyNotString)
		}
		if err != nil {
			errs[i] = err
		}
	}
}

// secretString calls GetSecretValue and returns the SecretString, or an *Error whose Secret the
// caller fills in.
func (f *Fetcher) secretString(ctx context.Context, client *secretsmanager.Client, ref asmRef) (string, *Error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.CallTimeout)
	defer cancel()
	in := &secretsmanager.GetSecretValueInput{SecretId: aws.String(ref.secretID)}
	if ref.stage != "" {
		in.VersionStage = aws.String(ref.stage)
	}
	if ref.versionID != "" {
		in.VersionId = aws.String(ref.versionID)
	}
	out, err := client.GetSecretValue(ctx, in)
	if err != nil {
		return "", awsError("", err)
	}
	if out.SecretString == nil {
		return "", localError("", CodeNoSecretString, errors.New("the secret holds SecretBinary, not SecretString"))
	}
	return *out.SecretString, nil
}

// jsonObject parses s as a JSON object. The error never quotes s: a JSON syntax error would.
func jsonObject(label, s string) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &obj); err != nil || obj == nil {
		return nil, localError(label, CodeNotJSONObject, errors.New("the SecretString is not a JSON object"))
	}
	return obj, nil
}

// jsonString returns the string member key of obj, or an *Error with notFound or notString.
func jsonString(label string, obj map[string]json.RawMessage, key, notFound, notString string) (string, error) {
	raw, ok := obj[key]
	if !ok {
		return "", localError(label, notFound, errors.New("the SecretString has no member named "+shown(key)))
	}
	var v string
	if raw = bytes.TrimSpace(raw); len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return "", localError(label, notString, errors.New("the SecretString member "+shown(key)+" is not a string"))
	}
	return v, nil
}
