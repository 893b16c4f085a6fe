package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sts"
)

// defaultSTSRegion is the region STS is asked in when the environment names none: the region of
// STS's global endpoint.
const defaultSTSRegion = "us-east-1"

// awsIdentity resolves credentials with the AWS SDK's default chain — in a task, the container
// credentials provider (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI) — and, unless
// credsOnly, calls sts:GetCallerIdentity with them (AWS_ENDPOINT_URL_STS applies). It prints
// AccessKeyId=, CredentialsSource= and then Account= and Arn=, one a line; never the secret key or
// the session token.
func awsIdentity(ctx context.Context, w io.Writer, credsOnly bool, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("load AWS SDK configuration: %w", err)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("resolve AWS credentials: %w", err)
	}
	fmt.Fprintf(w, "AccessKeyId=%s\nCredentialsSource=%s\n", creds.AccessKeyID, creds.Source)
	if credsOnly {
		return nil
	}
	if cfg.Region == "" {
		cfg.Region = defaultSTSRegion
	}
	out, err := sts.NewFromConfig(cfg).GetCallerIdentity(ctx, &sts.GetCallerIdentityInput{})
	if err != nil {
		return fmt.Errorf("sts:GetCallerIdentity: %w", err)
	}
	fmt.Fprintf(w, "Account=%s\nArn=%s\n", aws.ToString(out.Account), aws.ToString(out.Arn))
	return nil
}

// metadataEnv names the task metadata endpoint v4 of a container.
const metadataEnv = "ECS_CONTAINER_METADATA_URI_V4"

// getMetadata GETs $ECS_CONTAINER_METADATA_URI_V4, or path below it ("task", "stats",
// "task/stats"), and writes the body to w, ending in a newline. It fails on anything but a 200, with the status and the
// start of the body.
func getMetadata(ctx context.Context, w io.Writer, path string, timeout time.Duration) error {
	base := os.Getenv(metadataEnv)
	if base == "" {
		return fmt.Errorf("%s is not set (not in an ECS task?)", metadataEnv)
	}
	url := strings.TrimRight(base, "/")
	if path = strings.Trim(path, "/"); path != "" {
		url += "/" + path
	}
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
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s answered %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("GET %s: read body: %w", url, err)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n') // one body, one line of the container's log
	}
	_, err = w.Write(b)
	return err
}
