package registryauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/set"
)

const (
	account  = "012345678901"
	ecrHost  = account + ".dkr.ecr.us-east-1.amazonaws.com"
	ecrImage = ecrHost + ":5000/team/app:1.2" // tests use a port, as a registry mirror would
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// defaultExclude is the agent's default ECS_REGISTRY_ECR_EXCLUDE_ACCOUNTS.
func defaultExclude() set.Set[string] { return set.Of("602401143452", "918309763551") }

func newProvider(t *testing.T, cfg Config) (*Provider, *logger.Buffer) {
	t.Helper()
	log, buf := newLogger(t)
	if cfg.ExcludeAccounts.Len() == 0 {
		cfg.ExcludeAccounts = defaultExclude()
	}
	p, err := New(cfg, log)
	require.NoError(t, err)
	return p, buf
}

func wantECRAuth(acct string) docker.AuthConfiguration {
	return docker.AuthConfiguration{Username: ecrUser, Password: ecrPassword,
		ServerAddress: "https://" + acct + ".dkr.ecr.us-east-1.amazonaws.com"}
}

func TestECRTokenCacheRefreshInvalidate(t *testing.T) {
	isolateAWS(t)
	setEnvCredentials(t)
	imds := newFakeIMDS(t, "us-east-1")
	ecr := newFakeECR(t, t0.Add(12*time.Hour)).useAsDefault(t)
	clock := clockwork.NewFakeClockAt(t0)
	p, buf := newProvider(t, Config{AWSRegion: "us-east-1", Clock: clock})
	ctx := context.Background()

	steps := []struct {
		name         string
		do           func()
		image        string
		wantRequests int64
	}{
		{name: "first pull fetches", image: ecrImage, wantRequests: 1},
		{name: "second pull uses the cache", image: ecrImage, wantRequests: 1},
		{name: "other repository of the registry uses the cache", image: ecrHost + "/other@sha256:abc", wantRequests: 1},
		{name: "an hour before expiry still cached", do: func() { clock.Advance(11 * time.Hour) }, image: ecrImage, wantRequests: 1},
		{name: "inside the refresh margin refetches", do: func() {
			ecr.setExpiry(t0.Add(24 * time.Hour))
			clock.Advance(31 * time.Minute)
		}, image: ecrImage, wantRequests: 2},
		{name: "refreshed token is cached", image: ecrImage, wantRequests: 2},
		{name: "invalidate refetches", do: func() { p.Invalidate(ecrImage) }, image: ecrImage, wantRequests: 3},
		{name: "invalidating another registry keeps the token", do: func() {
			p.Invalidate("210987654321.dkr.ecr.us-east-1.amazonaws.com/app")
			p.Invalidate("busybox")
		}, image: ecrImage, wantRequests: 3},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.do != nil {
				st.do()
			}
			got, err := p.Auth(ctx, st.image)
			require.NoError(t, err)
			assert.Equal(t, wantECRAuth(account), got)
			assert.Equal(t, st.wantRequests, ecr.requests.Load())
		})
	}
	assert.Equal(t, []string{"AKIDENV", "AKIDENV", "AKIDENV"}, ecr.accessKeyIDs())
	assert.Equal(t, []string{"us-east-1", "us-east-1", "us-east-1"}, ecr.regions)
	assert.Equal(t, [][]string{{account}, {account}, {account}}, ecr.registry)
	assert.Zero(t, imds.total.Load(), "region and credentials are configured: IMDS is not asked")
	assert.Len(t, logLines(buf, "level=warn"), 0)
	assertNoSecrets(t, "log", buf.String())
}

func TestECRRefreshFailureKeepsValidToken(t *testing.T) {
	isolateAWS(t)
	setEnvCredentials(t)
	t.Setenv("AWS_MAX_ATTEMPTS", "1")
	ecr := newFakeECR(t, t0.Add(time.Hour)).useAsDefault(t)
	clock := clockwork.NewFakeClockAt(t0)
	p, buf := newProvider(t, Config{AWSRegion: "us-east-1", Clock: clock})

	_, err := p.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	ecr.fail(500, "ServerException")

	clock.Advance(40 * time.Minute) // 20 minutes left: refresh, which fails
	got, err := p.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, int64(2), ecr.requests.Load())
	assert.Len(t, logLines(buf, "level=warn"), 1)

	clock.Advance(30 * time.Minute) // expired: no fallback
	_, err = p.Auth(context.Background(), ecrImage)
	var unreachable *ECRUnreachableError
	require.ErrorAs(t, err, &unreachable)
	assertNoSecrets(t, "log", buf.String())
	assertNoSecrets(t, "error", err.Error())
}

func TestECRConcurrentAuthSharesOneRequest(t *testing.T) {
	isolateAWS(t)
	setEnvCredentials(t)
	ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
	ecr.delay = 100 * time.Millisecond
	p, buf := newProvider(t, Config{AWSRegion: "us-east-1"})

	const n = 20
	var wg sync.WaitGroup
	results := make([]docker.AuthConfiguration, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = p.Auth(context.Background(), fmt.Sprintf("%s/app%d:latest", ecrHost, i))
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, wantECRAuth(account), results[i])
	}
	assert.Equal(t, int64(1), ecr.requests.Load())
	assert.Len(t, logLines(buf, "AWS is reachable"), 1, "detection ran once")
}

func TestECRErrors(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(t *testing.T, ecr *fakeECR)
		wantRetry  bool
		wantCause  string
		wantCalled bool
	}{
		{name: "access denied", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(400, "AccessDeniedException") },
			wantCause: "AccessDeniedException", wantCalled: true},
		{name: "invalid parameter", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(400, "InvalidParameterException") },
			wantCause: "InvalidParameterException", wantCalled: true},
		{name: "forbidden", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(403, "UnrecognizedClientException") },
			wantCause: "UnrecognizedClientException", wantCalled: true},
		{name: "server error", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(500, "ServerException") },
			wantRetry: true, wantCause: "ServerException", wantCalled: true},
		{name: "throttled", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(400, "ThrottlingException") },
			wantRetry: true, wantCause: "ThrottlingException", wantCalled: true},
		{name: "too many requests", setup: func(t *testing.T, ecr *fakeECR) { ecr.fail(429, "TooManyRequestsException") },
			wantRetry: true, wantCause: "TooManyRequestsException", wantCalled: true},
		{name: "network error", setup: func(t *testing.T, ecr *fakeECR) { t.Setenv("AWS_ENDPOINT_URL_ECR", closedURL(t)) },
			wantRetry: true, wantCause: "connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			setEnvCredentials(t)
			t.Setenv("AWS_MAX_ATTEMPTS", "1")
			ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
			tt.setup(t, ecr)
			p, buf := newProvider(t, Config{AWSRegion: "us-east-1", CallTimeout: 2 * time.Second})

			got, err := p.Auth(context.Background(), ecrImage)
			require.Error(t, err)
			assert.Zero(t, got)
			assert.Equal(t, tt.wantRetry, errdefs.IsRetriable(err))
			var cannot *CannotPullECRContainerError
			var unreachable *ECRUnreachableError
			if tt.wantRetry {
				require.ErrorAs(t, err, &unreachable)
				assert.False(t, errors.As(err, &cannot))
				assert.True(t, errdefs.IsUnavailable(err))
			} else {
				require.ErrorAs(t, err, &cannot)
				assert.True(t, errdefs.IsUnauthorized(err))
				assert.Equal(t, ecrImage, cannot.Image)
				assert.Equal(t, ecrHost+":5000", cannot.Registry)
			}
			assert.Contains(t, err.Error(), ecrImage)
			assert.Contains(t, err.Error(), ecrHost)
			assert.Contains(t, err.Error(), tt.wantCause)
			assert.Equal(t, tt.wantCalled, ecr.requests.Load() > 0)
			assertNoSecrets(t, "error", err.Error())
			assertNoSecrets(t, "log", buf.String())
		})
	}
}

func TestNoAWSWorkWithoutECRImages(t *testing.T) {
	isolateAWS(t)
	imds := newFakeIMDS(t, "us-east-1")
	ecr := newFakeECR(t, time.Now().Add(time.Hour)).useAsDefault(t)
	p, buf := newProvider(t, Config{})
	require.NoError(t, p.CheckRequired(context.Background()))

	for _, image := range []string{"127.0.0.1:5000/foo", "busybox", "localhost/app:1", "registry.example.com/a/b@sha256:abc",
		"123.dkr.ecr.us-east-1.amazonaws.com/short", account + ".dkr.ecr.us-east-1.amazonaws.com.evil.com/app"} {
		t.Run(image, func(t *testing.T) {
			got, err := p.Auth(context.Background(), image)
			require.NoError(t, err)
			assert.Zero(t, got)
			p.Invalidate(image)
		})
	}
	assert.Zero(t, imds.total.Load())
	assert.Zero(t, ecr.requests.Load())
	logs := strings.ToLower(buf.String())
	for _, word := range []string{"aws", "ecr", "imds", "metadata"} {
		assert.NotContains(t, logs, word)
	}
}

func TestAWSUnreachableWarnsOnce(t *testing.T) {
	tests := []struct {
		name   string
		region string
		setup  func(t *testing.T)
	}{
		{name: "IMDS port closed, no credentials", setup: func(t *testing.T) {}},
		{name: "IMDS disabled, no credentials", setup: func(t *testing.T) { t.Setenv("AWS_EC2_METADATA_DISABLED", "true") }},
		{name: "region configured, IMDS port closed, no credentials", region: "us-east-1", setup: func(t *testing.T) {}},
		{name: "IMDS answers region, credentials refused", setup: func(t *testing.T) {
			newFakeIMDS(t, "us-east-1").noRole.Store(true)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			tt.setup(t)
			ecr := newFakeECR(t, time.Now().Add(time.Hour)).useAsDefault(t)
			p, buf := newProvider(t, Config{AWSRegion: tt.region, DetectTimeout: 3 * time.Second})
			start := time.Now()
			for range 5 {
				got, err := p.Auth(context.Background(), ecrImage)
				require.NoError(t, err)
				assert.Zero(t, got)
			}
			var wg sync.WaitGroup
			for range 5 {
				wg.Go(func() {
					got, err := p.Auth(context.Background(), ecrImage)
					assert.NoError(t, err)
					assert.Zero(t, got)
				})
			}
			wg.Wait()
			assert.Less(t, time.Since(start), 3*time.Second)
			warnings := logLines(buf, "level=warn")
			require.Len(t, warnings, 1, buf.String())
			assert.Contains(t, warnings[0], "ECR credentials are unavailable")
			assert.Len(t, logLines(buf, ""), 1, "nothing else is logged")
			assert.Zero(t, ecr.requests.Load())
			assertNoSecrets(t, "log", buf.String())
		})
	}
}

func TestImagesOutsideTheFiltersCauseNoAWSWork(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		image     string
		wantDebug string
		wantToken bool
	}{
		{name: "included (control)", cfg: Config{}, image: ecrImage, wantToken: true},
		{name: "EKS system account excluded", cfg: Config{},
			image: "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause:3.9", wantDebug: "account is excluded"},
		{name: "account excluded explicitly", cfg: Config{ExcludeAccounts: set.Of(account)},
			image: ecrImage, wantDebug: "account is excluded"},
		{name: "account not in include list", cfg: Config{IncludeAccounts: set.Of("111111111111")},
			image: ecrImage, wantDebug: "account is not included"},
		{name: "account in include list (control)", cfg: Config{IncludeAccounts: set.Of(account)},
			image: ecrImage, wantToken: true},
		{name: "region not in configured list", cfg: Config{ECRRegions: config.ECRRegions{Configured: true, Regions: set.Of("eu-west-1")}},
			image: ecrImage, wantDebug: "region is not a configured ECR region"},
		{name: "regions configured empty", cfg: Config{ECRRegions: config.ECRRegions{Configured: true}},
			image: ecrImage, wantDebug: "ECR credentials are turned off"},
		{name: "region in configured list (control)", cfg: Config{ECRRegions: config.ECRRegions{Configured: true, Regions: set.Of("us-east-1")}},
			image: ecrImage, wantToken: true},
		{name: "other region than configured host region", cfg: Config{AWSRegion: "eu-west-1"},
			image: ecrImage, wantDebug: "region is not this host's region"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			// Credentials come from the IMDS stand-in, so any detection shows up in its count.
			imds := newFakeIMDS(t, "us-east-1")
			ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
			p, buf := newProvider(t, tt.cfg)

			got, err := p.Auth(context.Background(), tt.image)
			require.NoError(t, err)
			if tt.wantToken {
				assert.Equal(t, wantECRAuth(account), got)
				assert.Equal(t, int64(1), ecr.requests.Load())
				assert.Equal(t, []string{"AKIDIMDS"}, ecr.accessKeyIDs())
				return
			}
			assert.Zero(t, got)
			assert.Zero(t, imds.total.Load(), "IMDS")
			assert.Zero(t, ecr.requests.Load(), "ECR")
			debug := logLines(buf, "level=debug")
			require.Len(t, debug, 1, buf.String())
			assert.Contains(t, debug[0], tt.wantDebug)
			assert.Len(t, logLines(buf, ""), 1)
		})
	}
}

func TestDetectedRegionIsTheOnlyIncludedRegion(t *testing.T) {
	isolateAWS(t)
	imds := newFakeIMDS(t, "us-east-1") // region and instance-role credentials
	ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
	p, buf := newProvider(t, Config{})

	got, err := p.Auth(context.Background(), "012345678901.dkr.ecr.eu-west-1.amazonaws.com/app")
	require.NoError(t, err)
	assert.Zero(t, got)
	assert.Zero(t, ecr.requests.Load())
	assert.Len(t, logLines(buf, "region is not this host's region"), 1)

	got, err = p.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, []string{"AKIDIMDS"}, ecr.accessKeyIDs())
	assert.Equal(t, int64(1), imds.regions.Load())
	assertNoSecrets(t, "log", buf.String())
}

func TestCheckRequired(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		setup   func(t *testing.T)
		wantErr []string
	}{
		{name: "IMDS port closed", cfg: Config{Require: set.Of(RequireECR)}, setup: func(t *testing.T) {},
			wantErr: []string{`registry requirement "ecr": AWS is not reachable`, "region"}},
		{name: "IMDS disabled", cfg: Config{Require: set.Of(RequireECR)},
			setup:   func(t *testing.T) { t.Setenv("AWS_EC2_METADATA_DISABLED", "true") },
			wantErr: []string{`registry requirement "ecr": AWS is not reachable`}},
		{name: "region configured, no credentials", cfg: Config{Require: set.Of(RequireECR), AWSRegion: "us-east-1"},
			setup:   func(t *testing.T) { t.Setenv("AWS_EC2_METADATA_DISABLED", "true") },
			wantErr: []string{`registry requirement "ecr": AWS is not reachable`, "credentials"}},
		{name: "ECR turned off", cfg: Config{Require: set.Of(RequireECR), ECRRegions: config.ECRRegions{Configured: true}},
			setup:   func(t *testing.T) { setEnvCredentials(t) },
			wantErr: []string{`registry requirement "ecr"`, "turned off"}},
		{name: "unknown vendor", cfg: Config{Require: set.Of("gcr")}, setup: func(t *testing.T) {},
			wantErr: []string{`registry requirement "gcr"`}},
		{name: "region list and env credentials", cfg: Config{Require: set.Of(RequireECR),
			ECRRegions: config.ECRRegions{Configured: true, Regions: set.Of("us-east-1")}},
			setup: func(t *testing.T) { setEnvCredentials(t) }},
		{name: "nothing required", cfg: Config{}, setup: func(t *testing.T) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			tt.setup(t)
			ecr := newFakeECR(t, time.Now().Add(time.Hour)).useAsDefault(t)
			p, buf := newProvider(t, tt.cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := p.CheckRequired(ctx)
			assert.NoError(t, ctx.Err(), "returned within the deadline")
			if tt.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				for _, want := range tt.wantErr {
					assert.Contains(t, err.Error(), want)
				}
				assertNoSecrets(t, "error", err.Error())
			}
			assert.Zero(t, ecr.requests.Load())
			assert.Empty(t, logLines(buf, "level=warn"))
			assertNoSecrets(t, "log", buf.String())
		})
	}
}

func TestCheckRequiredCountsAsDetection(t *testing.T) {
	isolateAWS(t)
	imds := newFakeIMDS(t, "us-east-1")
	ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
	p, buf := newProvider(t, Config{Require: set.Of(RequireECR)})

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	require.NoError(t, p.CheckRequired(ctx))
	assert.Equal(t, int64(1), imds.regions.Load())
	assert.Positive(t, imds.creds.Load())
	afterCheck := imds.total.Load()

	for range 3 {
		got, err := p.Auth(context.Background(), ecrImage)
		require.NoError(t, err)
		assert.Equal(t, wantECRAuth(account), got)
	}
	assert.Equal(t, afterCheck, imds.total.Load(), "Auth does not detect again")
	assert.Equal(t, int64(1), ecr.requests.Load())
	assert.Equal(t, []string{"AKIDIMDS"}, ecr.accessKeyIDs())
	assert.Len(t, logLines(buf, "AWS is reachable"), 1)
	assertNoSecrets(t, "log", buf.String())
}

func TestAuthHonoursContext(t *testing.T) {
	isolateAWS(t)
	setEnvCredentials(t)
	ecr := newFakeECR(t, time.Now().Add(12*time.Hour)).useAsDefault(t)
	ecr.delay = 300 * time.Millisecond
	p, _ := newProvider(t, Config{AWSRegion: "us-east-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := p.Auth(ctx, ecrImage)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// The shared fetch went on and filled the cache.
	require.Eventually(t, func() bool {
		_, ok := p.tokens.get(tokenKey{reg: ecrRegistry{account: account, region: "us-east-1"}})
		return ok
	}, 2*time.Second, 10*time.Millisecond)
	got, err := p.Auth(context.Background(), ecrImage)
	require.NoError(t, err)
	assert.Equal(t, wantECRAuth(account), got)
	assert.Equal(t, int64(1), ecr.requests.Load())
}
