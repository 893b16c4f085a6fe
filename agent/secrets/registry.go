package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// RegistryCredentials fetches the private registry credentials of a container definition's
// repositoryCredentials.credentialsParameter: a Secrets Manager secret, by ARN or name, whose
// SecretString is {"username":"…","password":"…"}, both non-empty strings. region may be empty:
// then the ARN's region, else the default region, is asked. A secret of another shape is
// CodeNotJSONObject or CodeInvalidRegistryCredentials; every failure is an *Error naming
// "repository credentials <param>" (or a plain error when creds is nil or the SDK configuration
// does not load).
func (f *Fetcher) RegistryCredentials(ctx context.Context, creds aws.CredentialsProvider, param, region string) (username, password string, err error) {
	awsCfg, defaultRegion, err := f.sdk(ctx, creds)
	if err != nil {
		return "", "", err
	}
	label := "repository credentials " + shown(param)
	if err := checkText("credentialsParameter", param, MaxReferenceLength); err != nil {
		return "", "", localError(label, CodeInvalidReference, err)
	}
	ref, err := parseASM(param, false)
	if err != nil {
		return "", "", localError(label, CodeInvalidReference, fmt.Errorf("credentialsParameter: %w", err))
	}
	var arnRegion string
	if a, err := parseARN(ref.secretID); err == nil {
		arnRegion = a.region
	}
	if region, err = pickRegion(region, arnRegion, defaultRegion); err != nil {
		return "", "", localError(label, CodeInvalidReference, err)
	}
	s, serr := f.secretString(ctx, f.asmClient(awsCfg, region, creds), ref)
	if serr != nil {
		serr.Secret = label
		return "", "", serr
	}
	obj, err := jsonObject(label, s)
	if err != nil {
		return "", "", err
	}
	if username, err = jsonString(label, obj, "username", CodeInvalidRegistryCredentials, CodeInvalidRegistryCredentials); err != nil {
		return "", "", err
	}
	if password, err = jsonString(label, obj, "password", CodeInvalidRegistryCredentials, CodeInvalidRegistryCredentials); err != nil {
		return "", "", err
	}
	if username == "" || password == "" {
		return "", "", localError(label, CodeInvalidRegistryCredentials, errors.New("the SecretString has an empty username or password"))
	}
	return username, password, nil
}
