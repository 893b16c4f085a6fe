package secrets

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// MaxFileSize bounds a file fetched with File (CodeFileTooLarge beyond it).
const MaxFileSize = 4 << 20

// File fetches, in the default region, the S3 object arn names (arn:<partition>:s3:::<bucket>/<key>)
// with creds: a configuration file the agent hands to a container as is (a FireLens router's
// config-file-value). what names the file in errors ("firelens configuration file"). The ARN is
// validated before anything is fetched; a failure is an *Error naming what and the ARN (or a plain
// error when creds is nil or the SDK configuration does not load).
func (f *Fetcher) File(ctx context.Context, creds aws.CredentialsProvider, what, arn string) ([]byte, error) {
	awsCfg, region, err := f.sdk(ctx, creds)
	if err != nil {
		return nil, err
	}
	label := what + " " + shown(arn)
	bucket, key, err := s3Object(arn)
	if err != nil {
		return nil, localError(label, CodeInvalidReference, err)
	}
	if region == "" {
		return nil, localError(label, CodeInvalidReference, errors.New("no default region is configured to ask S3 in"))
	}
	body, err := f.getObject(ctx, f.s3Client(awsCfg, region, creds), bucket, key, label, MaxFileSize, CodeFileTooLarge)
	if err != nil {
		return nil, err
	}
	return []byte(body), nil
}
