package secrets

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Ref.Provider values.
const (
	ProviderSSM = "ssm" // SSM Parameter Store
	ProviderASM = "asm" // AWS Secrets Manager
)

// Bounds of what is checked before anything is fetched. Every check is linear in the input, and
// the length is checked first.
const (
	// MaxNameLength bounds Ref.Name.
	MaxNameLength = 1024
	// MaxReferenceLength bounds a valueFrom, an environment file ARN and a credentials parameter
	// (SSM and Secrets Manager allow 2048 characters for an ARN).
	MaxReferenceLength = 2048
	// maxRegionLength bounds a region name.
	maxRegionLength = 64
)

// Ref is one secret of a container definition: an entry of secrets[] or of
// logConfiguration.secretOptions[].
type Ref struct {
	// Name is the environment variable or log option the value becomes.
	Name string
	// ValueFrom is an SSM parameter name or ARN (a name may carry a ":version" or ":label"
	// selector), or a Secrets Manager secret name or ARN; an ARN may go on with
	// ":json-key:version-stage:version-id", any of them empty.
	ValueFrom string
	// Provider is ProviderSSM or ProviderASM; empty: ProviderASM when ValueFrom is an
	// arn:<partition>:secretsmanager: ARN, else ProviderSSM.
	Provider string
	// Region is the region to ask; empty: the ARN's region, else the Fetcher's default region.
	Region string
}

// target is a validated Ref: what to ask, where.
type target struct {
	label    string // names the ref in errors
	provider string
	region   string
	asm      asmRef // when provider is ProviderASM
}

// asmRef is a Secrets Manager reference split into the GetSecretValue request and the json-key.
type asmRef struct {
	secretID, jsonKey, stage, versionID string
}

// arn is an ARN split into its fields; resource keeps any further colons.
type arn struct {
	partition, service, region, account, resource string
}

// parseARN splits s, which starts with "arn:", into its six fields.
func parseARN(s string) (arn, error) {
	f := strings.SplitN(s, ":", 6)
	if len(f) != 6 || f[0] != "arn" {
		return arn{}, errors.New("an ARN has six colon-separated fields")
	}
	if f[1] == "" || f[2] == "" {
		return arn{}, errors.New("the ARN has no partition or service")
	}
	return arn{partition: f[1], service: f[2], region: f[3], account: f[4], resource: f[5]}, nil
}

// checkText reports whether s is non-empty, at most max bytes, and printable ASCII without spaces.
func checkText(what, s string, max int) error {
	if s == "" {
		return fmt.Errorf("%s is empty", what)
	}
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes long, more than %d", what, len(s), max)
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return fmt.Errorf("%s has a character that is not printable ASCII at byte %d", what, i)
		}
	}
	return nil
}

// checkRegion reports whether s looks like a region name (us-east-1, cn-north-1, us-gov-west-1).
func checkRegion(what, s string) error {
	if s == "" || len(s) > maxRegionLength {
		return fmt.Errorf("%s %s is not a region name", what, shown(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("%s %s is not a region name", what, shown(s))
		}
	}
	return nil
}

// shown returns s for an error message: as is when it is short printable ASCII, else quoted and,
// past 64 bytes, cut with its length.
func shown(s string) string {
	if checkText("", s, 256) == nil {
		return s
	}
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "…(" + strconv.Itoa(len(s)) + " bytes)"
	}
	return strconv.Quote(s)
}

// refLabel names a ref in errors.
func refLabel(r Ref) string {
	return "secret " + shown(r.Name) + " (valueFrom " + shown(r.ValueFrom) + ")"
}

// parseRef validates r and decides its provider and region; defaultRegion may be empty, which is an
// error only for a ref that needs it.
func parseRef(r Ref, defaultRegion string) (target, error) {
	t := target{label: refLabel(r), provider: r.Provider}
	invalid := func(err error) (target, error) {
		return target{}, localError(t.label, CodeInvalidReference, err)
	}
	if err := checkText("name", r.Name, MaxNameLength); err != nil {
		return invalid(err)
	}
	if strings.IndexByte(r.Name, '=') >= 0 {
		return invalid(errors.New("name has an '='"))
	}
	if err := checkText("valueFrom", r.ValueFrom, MaxReferenceLength); err != nil {
		return invalid(err)
	}
	var a arn
	isARN := strings.HasPrefix(r.ValueFrom, "arn:")
	if isARN {
		var err error
		if a, err = parseARN(r.ValueFrom); err != nil {
			return invalid(fmt.Errorf("valueFrom: %w", err))
		}
	}
	if t.provider == "" {
		t.provider = ProviderSSM
		if isARN && a.service == "secretsmanager" {
			t.provider = ProviderASM
		}
	}
	switch t.provider {
	case ProviderSSM:
		if isARN && (a.service != "ssm" || !strings.HasPrefix(a.resource, "parameter/")) {
			return invalid(errors.New("valueFrom is an ARN but not of an SSM parameter (arn:<partition>:ssm:<region>:<account>:parameter/<name>)"))
		}
	case ProviderASM:
		var err error
		if t.asm, err = parseASM(r.ValueFrom, true); err != nil {
			return invalid(fmt.Errorf("valueFrom: %w", err))
		}
	default:
		return invalid(fmt.Errorf("provider %q is neither %q nor %q", shown(r.Provider), ProviderSSM, ProviderASM))
	}
	region, err := pickRegion(r.Region, a.region, defaultRegion)
	if err != nil {
		return invalid(err)
	}
	t.region = region
	return t, nil
}

// pickRegion returns the explicit region, else the ARN's, else the default, checking the one
// chosen.
func pickRegion(explicit, fromARN, defaultRegion string) (string, error) {
	switch {
	case explicit != "":
		return explicit, checkRegion("region", explicit)
	case fromARN != "":
		return fromARN, checkRegion("the ARN's region", fromARN)
	case defaultRegion != "":
		return defaultRegion, nil
	}
	return "", errors.New("the reference is not an ARN with a region and no default region is configured")
}

// parseASM splits a Secrets Manager secret name or ARN. An ARN may go on with
// ":json-key:version-stage:version-id" when suffixes is set; a name never does (names have no
// colons).
func parseASM(s string, suffixes bool) (asmRef, error) {
	if !strings.HasPrefix(s, "arn:") {
		if strings.IndexByte(s, ':') >= 0 {
			return asmRef{}, errors.New("a Secrets Manager secret name has no ':'; use the secret's ARN for a json-key, version stage or version ID")
		}
		return asmRef{secretID: s}, nil
	}
	a, err := parseARN(s)
	if err != nil {
		return asmRef{}, err
	}
	if a.service != "secretsmanager" || a.region == "" || a.account == "" || !strings.HasPrefix(a.resource, "secret:") {
		return asmRef{}, errors.New("not a Secrets Manager secret ARN (arn:<partition>:secretsmanager:<region>:<account>:secret:<name>)")
	}
	f := strings.Split(strings.TrimPrefix(a.resource, "secret:"), ":")
	if f[0] == "" {
		return asmRef{}, errors.New("the ARN names no secret")
	}
	if len(f) > 4 || !suffixes && len(f) > 1 {
		return asmRef{}, errors.New("too many ':'-separated fields after the secret name")
	}
	f = append(f, "", "", "")
	return asmRef{
		secretID:  strings.Join([]string{"arn", a.partition, a.service, a.region, a.account, "secret", f[0]}, ":"),
		jsonKey:   f[1],
		stage:     f[2],
		versionID: f[3],
	}, nil
}

// s3Object returns the bucket and key of an S3 object ARN (arn:<partition>:s3:::<bucket>/<key>).
func s3Object(s string) (bucket, key string, err error) {
	if err := checkText("the ARN", s, MaxReferenceLength); err != nil {
		return "", "", err
	}
	a, err := parseARN(s)
	if err != nil {
		return "", "", err
	}
	if a.service != "s3" || a.region != "" || a.account != "" {
		return "", "", errors.New("not an S3 object ARN (arn:<partition>:s3:::<bucket>/<key>)")
	}
	bucket, key, ok := strings.Cut(a.resource, "/")
	if !ok || key == "" {
		return "", "", errors.New("the ARN names no object key")
	}
	if len(bucket) < 3 || len(bucket) > 63 {
		return "", "", errors.New("the bucket name is not 3 to 63 characters long")
	}
	for i := 0; i < len(bucket); i++ {
		c := bucket[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", "", errors.New("the bucket name has a character other than a-z, 0-9, '-' and '.'")
		}
	}
	return bucket, key, nil
}
