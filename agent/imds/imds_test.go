package imds_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/errdefs"
	"github.com/berth-agent/berth/agent/imds"
)

const (
	mac = "0e:49:61:0f:c3:11"
	doc = `{
	"accountId": "123456789012",
	"architecture": "arm64",
	"availabilityZone": "eu-west-1b",
	"imageId": "ami-0123456789abcdef0",
	"instanceId": "i-0abc123def4567890",
	"instanceType": "m7g.large",
	"pendingTime": "2026-11-30T08:00:00Z",
	"privateIp": "10.0.1.23",
	"region": "eu-west-1",
	"version": "2017-09-30"
}`
	signature = "dExkHDvBs7RxM4bUAnr4Lk3HvEqJz5vtlwRyxHI3kDw="
)

// instance is what a VPC instance's IMDS serves.
func instance() map[string]answer {
	return map[string]answer{
		"meta-data/placement/region":                              ok("eu-west-1\n"),
		"meta-data/placement/availability-zone-id":                ok("euw1-az2\n"),
		"dynamic/instance-identity/document":                      ok(doc),
		"dynamic/instance-identity/signature":                     ok(signature + "\n"),
		"meta-data/mac":                                           ok(mac),
		"meta-data/network/interfaces/macs/" + mac + "/vpc-id":    ok("vpc-0123abcd"),
		"meta-data/network/interfaces/macs/" + mac + "/subnet-id": ok("subnet-0456efab"),
		"meta-data/tags/instance/":                                ok("Name\nteam"),
		"meta-data/tags/instance/Name":                            ok("web-1"),
		"meta-data/tags/instance/team":                            ok("payments"),
	}
}

func TestRegion(t *testing.T) {
	f := newFakeIMDS(t, instance())
	region, err := f.client(nil).Region(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "eu-west-1", region)
	assert.Zero(t, f.refused, "every GET carries the IMDSv2 token")
	assert.Equal(t, 1, f.tokens)
}

func TestAvailabilityZoneID(t *testing.T) {
	f := newFakeIMDS(t, instance())
	id, err := f.client(nil).AvailabilityZoneID(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "euw1-az2", id)
}

func TestRegionErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer answer
		class  error
		text   string
	}{
		{"not found", notFound, errdefs.ErrNotFound, "answered 404 Not Found"},
		{"server error", answer{http.StatusServiceUnavailable, "busy"}, errdefs.ErrUnavailable, "answered 503"},
		{"throttled", answer{http.StatusTooManyRequests, "slow down"}, errdefs.ErrResourceExhausted, "answered 429"},
		{"forbidden", answer{http.StatusForbidden, "no"}, errdefs.ErrUnauthorized, "answered 403"},
		{"empty", ok("  \n"), imds.ErrBadResponse, "empty body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIMDS(t, map[string]answer{"meta-data/placement/region": tc.answer})
			_, err := f.client(nil).Region(context.Background())
			require.ErrorIs(t, err, tc.class)
			var e *imds.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, "meta-data/placement/region", e.Path)
			assert.Contains(t, err.Error(), "get meta-data/placement/region")
			assert.Contains(t, err.Error(), tc.text)
		})
	}
}

func TestIdentity(t *testing.T) {
	f := newFakeIMDS(t, instance())
	id, err := f.client(nil).Identity(context.Background())
	require.NoError(t, err)
	assert.Equal(t, imds.Identity{
		Document:         doc,
		Signature:        signature,
		InstanceID:       "i-0abc123def4567890",
		Region:           "eu-west-1",
		AvailabilityZone: "eu-west-1b",
		InstanceType:     "m7g.large",
		ImageID:          "ami-0123456789abcdef0",
		AccountID:        "123456789012",
		Architecture:     "arm64",
	}, id)
}

func TestIdentityErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(map[string]answer)
		class error
		path  string
	}{
		{"document not json", func(m map[string]answer) { m["dynamic/instance-identity/document"] = ok("<html>") }, imds.ErrBadResponse, "dynamic/instance-identity/document"},
		{"document without instanceId", func(m map[string]answer) { m["dynamic/instance-identity/document"] = ok(`{"region":"eu-west-1"}`) }, imds.ErrBadResponse, "dynamic/instance-identity/document"},
		{"no signature", func(m map[string]answer) { delete(m, "dynamic/instance-identity/signature") }, errdefs.ErrNotFound, "dynamic/instance-identity/signature"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := instance()
			tc.edit(m)
			f := newFakeIMDS(t, m)
			_, err := f.client(nil).Identity(context.Background())
			require.ErrorIs(t, err, tc.class)
			var e *imds.Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tc.path, e.Path)
		})
	}
}

func TestAttributes(t *testing.T) {
	full := map[string]string{
		imds.AttrInstanceType:     "m7g.large",
		imds.AttrAvailabilityZone: "eu-west-1b",
		imds.AttrAMIID:            "ami-0123456789abcdef0",
		imds.AttrCPUArchitecture:  "arm64",
		imds.AttrVPCID:            "vpc-0123abcd",
		imds.AttrSubnetID:         "subnet-0456efab",
	}
	without := func(keys ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for _, k := range keys {
			delete(m, k)
		}
		return m
	}
	for _, tc := range []struct {
		name  string
		edit  func(map[string]answer)
		want  map[string]string
		class error // when the call fails
	}{
		{"vpc instance", func(map[string]answer) {}, full, nil},
		{"on an outpost", func(m map[string]answer) {
			m["meta-data/outpost-arn"] = ok("arn:aws:outposts:eu-west-1:123456789012:outpost/op-0123")
		}, func() map[string]string {
			m := without()
			m[imds.AttrOutpostARN] = "arn:aws:outposts:eu-west-1:123456789012:outpost/op-0123"
			return m
		}(), nil},
		{"no vpc (404s are skipped)", func(m map[string]answer) {
			delete(m, "meta-data/network/interfaces/macs/"+mac+"/vpc-id")
			delete(m, "meta-data/network/interfaces/macs/"+mac+"/subnet-id")
		}, without(imds.AttrVPCID, imds.AttrSubnetID), nil},
		{"no mac", func(m map[string]answer) { delete(m, "meta-data/mac") },
			without(imds.AttrVPCID, imds.AttrSubnetID), nil},
		{"subnet-id fails", func(m map[string]answer) {
			m["meta-data/network/interfaces/macs/"+mac+"/subnet-id"] = answer{http.StatusInternalServerError, "oops"}
		}, nil, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := instance()
			tc.edit(m)
			f := newFakeIMDS(t, m)
			c := f.client(nil)
			id, err := c.Identity(context.Background())
			require.NoError(t, err)
			attrs, err := c.Attributes(context.Background(), id)
			if tc.class != nil {
				require.ErrorIs(t, err, tc.class)
				assert.Contains(t, err.Error(), "subnet-id")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, attrs)
		})
	}
}

func TestAttributesEmptyIdentity(t *testing.T) {
	m := instance()
	delete(m, "meta-data/mac")
	f := newFakeIMDS(t, m)
	attrs, err := f.client(nil).Attributes(context.Background(), imds.Identity{})
	require.NoError(t, err)
	assert.Empty(t, attrs, "empty identity fields are left out")
}

func TestInstanceTags(t *testing.T) {
	t.Run("enabled", func(t *testing.T) {
		f := newFakeIMDS(t, instance())
		tags, err := f.client(nil).InstanceTags(context.Background())
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"Name": "web-1", "team": "payments"}, tags)
	})
	t.Run("a key removed after the list", func(t *testing.T) {
		m := instance()
		delete(m, "meta-data/tags/instance/team")
		f := newFakeIMDS(t, m)
		tags, err := f.client(nil).InstanceTags(context.Background())
		require.NoError(t, err)
		assert.Equal(t, map[string]string{"Name": "web-1"}, tags)
	})
	t.Run("not enabled", func(t *testing.T) {
		m := instance()
		delete(m, "meta-data/tags/instance/")
		f := newFakeIMDS(t, m)
		_, err := f.client(nil).InstanceTags(context.Background())
		require.ErrorIs(t, err, imds.ErrTagsNotEnabled)
		assert.True(t, errdefs.IsFailedPrecondition(err))
		assert.False(t, errdefs.IsRetriable(err))
		assert.Contains(t, err.Error(), "meta-data/tags/instance/")
	})
}

func TestSpotInstanceAction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer answer
		want   imds.SpotAction
		ok     bool
		class  error
	}{
		{"no notice", notFound, imds.SpotAction{}, false, nil},
		{"terminate", ok(`{"action":"terminate","time":"2017-09-18T08:22:00Z"}`),
			imds.SpotAction{Action: "terminate", Time: time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)}, true, nil},
		{"hibernate", ok(`{"action": "hibernate", "time": "2026-11-30T21:00:00Z"}`),
			imds.SpotAction{Action: "hibernate", Time: time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)}, true, nil},
		{"not json", ok("terminate"), imds.SpotAction{}, false, imds.ErrBadResponse},
		{"unknown action", ok(`{"action":"explode","time":"2017-09-18T08:22:00Z"}`), imds.SpotAction{}, false, imds.ErrBadResponse},
		{"bad time", ok(`{"action":"stop","time":"soon"}`), imds.SpotAction{}, false, imds.ErrBadResponse},
		{"server error", answer{http.StatusInternalServerError, "oops"}, imds.SpotAction{}, false, errdefs.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIMDS(t, map[string]answer{"meta-data/spot/instance-action": tc.answer})
			got, found, err := f.client(nil).SpotInstanceAction(context.Background())
			if tc.class != nil {
				require.ErrorIs(t, err, tc.class)
				assert.False(t, found)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.ok, found)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestTargetLifecycleState(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer answer
		want   string
		class  error
	}{
		{"in service", ok("InService"), "InService", nil},
		{"warmed", ok("Warmed:Stopped\n"), "Warmed:Stopped", nil},
		{"not in an auto scaling group", notFound, "", nil},
		{"forbidden", answer{http.StatusForbidden, "no"}, "", errdefs.ErrUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIMDS(t, map[string]answer{"meta-data/autoscaling/target-lifecycle-state": tc.answer})
			got, err := f.client(nil).TargetLifecycleState(context.Background())
			if tc.class != nil {
				require.ErrorIs(t, err, tc.class)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestTokenRequired: the fake refuses a GET without the token, the client always sends one, and
// when no token can be had the client does not fall back to IMDSv1.
func TestTokenRequired(t *testing.T) {
	f := newFakeIMDS(t, instance())
	resp, err := http.Get(f.srv.URL + "/latest/meta-data/placement/region")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a GET without a token is refused")

	c := f.client(nil)
	for range 3 {
		_, err := c.Region(context.Background())
		require.NoError(t, err)
	}
	assert.Equal(t, 1, f.tokens, "the token is fetched once and reused")
	assert.Equal(t, 1, f.refused, "only the tokenless GET above was refused")

	f.refuseTokens(http.StatusForbidden)
	c = f.client(nil) // a fresh client has no token cached
	_, err = c.Region(context.Background())
	require.ErrorIs(t, err, errdefs.ErrUnauthorized)
	assert.Contains(t, err.Error(), "answered 403 Forbidden to the IMDSv2 session token request (PUT /latest/api/token)")
	assert.Equal(t, 1, f.refused, "no IMDSv1 GET without a token")
	assert.Equal(t, 3, f.count("meta-data/placement/region"))
}

// TestNoAnswerFailsFast: an IMDS that refuses connections, or accepts them and never answers, fails a
// call in well under 5 s, saying where it looked.
func TestNoAnswerFailsFast(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())

	release := make(chan struct{})
	var hung atomic.Int32
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })

	for _, tc := range []struct{ name, endpoint string }{
		{"connection refused", closed},
		{"never answers", hang.URL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := imds.New(imds.Options{Endpoint: tc.endpoint})
			start := time.Now()
			_, err := c.Region(context.Background())
			took := time.Since(start)
			require.Error(t, err)
			assert.Less(t, took, 5*time.Second)
			assert.True(t, errdefs.IsUnavailable(err), "%v", err)
			assert.True(t, errdefs.IsRetriable(err))
			assert.Contains(t, err.Error(), "get meta-data/placement/region: instance metadata service at "+tc.endpoint+" did not answer: ")
			t.Logf("failed after %v: %v", took, err)
		})
	}
	assert.Equal(t, int32(3), hung.Load(), "three attempts at the token")
}

func TestCallerCancels(t *testing.T) {
	f := newFakeIMDS(t, instance())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.client(nil).Region(ctx)
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, errdefs.IsUnavailable(err), "the caller's cancellation is not the peer's fault")
}

func TestDisabledByEnvironment(t *testing.T) {
	f := newFakeIMDS(t, instance())
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	c := f.client(nil)
	_, err := c.Region(context.Background())
	require.ErrorIs(t, err, imds.ErrDisabled)
	assert.True(t, errdefs.IsFailedPrecondition(err))
	_, err = c.Identity(context.Background())
	require.ErrorIs(t, err, imds.ErrDisabled)
	assert.Zero(t, f.tokens+f.refused, "nothing was sent")
}

func TestEndpointFromEnvironment(t *testing.T) {
	f := newFakeIMDS(t, instance())
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f.srv.URL)
	c := imds.New(imds.Options{})
	assert.Equal(t, f.srv.URL, c.Endpoint())
	region, err := c.Region(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "eu-west-1", region)

	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "")
	assert.Equal(t, imds.DefaultEndpoint, imds.New(imds.Options{}).Endpoint())
}

func TestWatchSpot(t *testing.T) {
	f := newFakeIMDS(t, nil)
	const path = "meta-data/spot/instance-action"
	notice := ok(`{"action":"stop","time":"2026-11-30T21:02:00Z"}`)
	f.sequence(path, notFound, answer{http.StatusInternalServerError, "oops"}, notFound, notice)
	clk := clockwork.NewFakeClock()
	c := f.client(clk)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []imds.SpotAction
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchSpot(ctx, 5*time.Second, func(a imds.SpotAction) { got = append(got, a) })
	}()
	drive(t, clk, 5*time.Second, done)
	<-done
	require.Len(t, got, 1, "onNotice is called once")
	assert.Equal(t, imds.SpotAction{Action: "stop", Time: time.Date(2026, 11, 30, 21, 2, 0, 0, time.UTC)}, got[0])
	assert.Equal(t, 4, f.count(path), "polled until the notice appeared, then stopped")
}

func TestWatchSpotStopsWithContext(t *testing.T) {
	f := newFakeIMDS(t, nil)
	clk := clockwork.NewFakeClock()
	c := f.client(clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.WatchSpot(ctx, 0, func(imds.SpotAction) { t.Error("no notice was served") })
	}()
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	require.NoError(t, clk.BlockUntilContext(waitCtx, 1), "the first poll happens at once, then it waits")
	cancel()
	<-done
	assert.Equal(t, 1, f.count("meta-data/spot/instance-action"))
}

func TestWaitInService(t *testing.T) {
	const path = "meta-data/autoscaling/target-lifecycle-state"
	for _, tc := range []struct {
		name    string
		answers []answer
		polls   int
		class   error // nil: returns nil once InService
	}{
		{"already in service", []answer{ok("InService")}, 1, nil},
		{"warm pool, then in service", []answer{notFound, ok("Warmed:Pending"), answer{http.StatusServiceUnavailable, "busy"},
			answer{http.StatusTooManyRequests, "slow"}, ok("Warmed:Stopped"), ok("InService")}, 6, nil},
		{"refused", []answer{ok("Pending"), answer{http.StatusForbidden, "no"}}, 2, errdefs.ErrUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeIMDS(t, nil)
			f.sequence(path, tc.answers...)
			clk := clockwork.NewFakeClock()
			c := f.client(clk)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var err error
			done := make(chan struct{})
			go func() {
				defer close(done)
				err = c.WaitInService(ctx, time.Minute)
			}()
			drive(t, clk, time.Minute, done)
			<-done
			if tc.class != nil {
				require.ErrorIs(t, err, tc.class)
				assert.Contains(t, err.Error(), "wait for target lifecycle state InService")
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.polls, f.count(path))
		})
	}
}

func TestWaitInServiceNoIMDS(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "false")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	endpoint := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	c := imds.New(imds.Options{Endpoint: endpoint, Clock: clockwork.NewFakeClock()})
	err = c.WaitInService(context.Background(), time.Minute)
	require.Error(t, err)
	assert.True(t, errdefs.IsUnavailable(err))
	assert.True(t, strings.Contains(err.Error(), "did not answer"), "%v", err)
}

func TestWaitInServiceContextEnds(t *testing.T) {
	f := newFakeIMDS(t, map[string]answer{"meta-data/autoscaling/target-lifecycle-state": ok("Warmed:Stopped")})
	clk := clockwork.NewFakeClock()
	c := f.client(clk)
	ctx, cancel := context.WithCancel(context.Background())
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		err = c.WaitInService(ctx, 0)
	}()
	waitCtx, waitCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer waitCancel()
	require.NoError(t, clk.BlockUntilContext(waitCtx, 1))
	cancel()
	<-done
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, errors.Is(err, context.Canceled))
	assert.Contains(t, err.Error(), `last "Warmed:Stopped"`)
}

// TestTokenNotFound: an IMDS without the token endpoint is not "no spot notice".
func TestTokenNotFound(t *testing.T) {
	f := newFakeIMDS(t, nil)
	f.refuseTokens(http.StatusNotFound)
	_, found, err := f.client(nil).SpotInstanceAction(context.Background())
	assert.False(t, found)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.False(t, errdefs.IsNotFound(err))
	var e *imds.Error
	require.ErrorAs(t, err, &e)
	assert.True(t, e.Token)
	assert.Equal(t, http.StatusNotFound, e.StatusCode)
}
