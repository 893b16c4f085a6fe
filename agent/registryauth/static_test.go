package registryauth

import (
	"context"
	"errors"
	"testing"

	docker "github.com/fsouza/go-dockerclient"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/errdefs"
)

func TestRegistryHost(t *testing.T) {
	tests := []struct {
		image   string
		want    string
		wantErr bool
	}{
		{image: "busybox", want: dockerHub},
		{image: "busybox:1.36", want: dockerHub},
		{image: "busybox@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", want: dockerHub},
		{image: "library/busybox:latest", want: dockerHub},
		{image: "docker.io/library/busybox", want: dockerHub},
		{image: "index.docker.io/library/busybox", want: dockerHub},
		{image: "registry-1.docker.io/library/busybox", want: dockerHub},
		{image: "localhost/foo", want: "localhost"},
		{image: "localhost:5000/foo:tag", want: "localhost:5000"},
		{image: "127.0.0.1:5000/foo", want: "127.0.0.1:5000"},
		{image: "Registry.Example.com/team/app:v1@sha256:abc", want: "registry.example.com"},
		{image: "myorg/app:5000", want: dockerHub},
		{image: "012345678901.dkr.ecr.us-east-1.amazonaws.com/app:1", want: "012345678901.dkr.ecr.us-east-1.amazonaws.com"},
		{image: "", wantErr: true},
		{image: "/foo", wantErr: true},
		{image: "host.example.com/", wantErr: true},
		{image: "bad image", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.image, func(t *testing.T) {
			got, err := registryHost(tt.image)
			if tt.wantErr {
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

const (
	dockerData = `{
		"https://index.docker.io/v1/": {"username": "hubuser", "password": "hub-pass-1", "email": "hub@example.com"},
		"http://registry.example.com:5000": {"username": "exuser", "password": "ex-pass-2"},
		"other.example.com/": {"username": "otheruser", "password": "other-pass-3"}
	}`
	// base64("cfguser:cfg-pass-4"), base64("localuser:local:pass-5")
	dockercfgData = `{
		"docker.io": {"auth": "Y2ZndXNlcjpjZmctcGFzcy00", "email": "cfg@example.com"},
		"localhost:5000": {"auth": "bG9jYWx1c2VyOmxvY2FsOnBhc3MtNQ=="}
	}`
)

func TestStaticAuth(t *testing.T) {
	tests := []struct {
		name     string
		authType string
		data     string
		image    string
		want     docker.AuthConfiguration
	}{
		{name: "docker hub short name", authType: AuthTypeDocker, data: dockerData, image: "busybox",
			want: docker.AuthConfiguration{Username: "hubuser", Password: "hub-pass-1", Email: "hub@example.com", ServerAddress: dockerHubServerAddress}},
		{name: "docker hub alias docker.io", authType: AuthTypeDocker, data: dockerData, image: "docker.io/library/busybox:1",
			want: docker.AuthConfiguration{Username: "hubuser", Password: "hub-pass-1", Email: "hub@example.com", ServerAddress: dockerHubServerAddress}},
		{name: "docker hub alias registry-1", authType: AuthTypeDocker, data: dockerData, image: "registry-1.docker.io/me/app",
			want: docker.AuthConfiguration{Username: "hubuser", Password: "hub-pass-1", Email: "hub@example.com", ServerAddress: dockerHubServerAddress}},
		{name: "http key with port", authType: AuthTypeDocker, data: dockerData, image: "registry.example.com:5000/team/app@sha256:abc",
			want: docker.AuthConfiguration{Username: "exuser", Password: "ex-pass-2", ServerAddress: "registry.example.com:5000"}},
		{name: "key with trailing slash", authType: AuthTypeDocker, data: dockerData, image: "other.example.com/app",
			want: docker.AuthConfiguration{Username: "otheruser", Password: "other-pass-3", ServerAddress: "other.example.com"}},
		{name: "same host other port is anonymous", authType: AuthTypeDocker, data: dockerData, image: "registry.example.com/team/app"},
		{name: "unknown registry is anonymous", authType: AuthTypeDocker, data: dockerData, image: "quay.io/org/app"},
		{name: "dockercfg hub", authType: AuthTypeDockercfg, data: dockercfgData, image: "index.docker.io/library/redis",
			want: docker.AuthConfiguration{Username: "cfguser", Password: "cfg-pass-4", Email: "cfg@example.com", ServerAddress: dockerHubServerAddress}},
		{name: "dockercfg password with colon", authType: AuthTypeDockercfg, data: dockercfgData, image: "localhost:5000/app:1",
			want: docker.AuthConfiguration{Username: "localuser", Password: "local:pass-5", ServerAddress: "localhost:5000"}},
		{name: "dockercfg unknown is anonymous", authType: AuthTypeDockercfg, data: dockercfgData, image: "127.0.0.1:5000/app"},
		{name: "no data", authType: "", data: "", image: "busybox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWS(t)
			imds := newFakeIMDS(t, "us-east-1")
			log, buf := newLogger(t)
			p, err := New(Config{AuthType: tt.authType, AuthData: config.Secret(tt.data)}, log)
			require.NoError(t, err)
			got, err := p.Auth(context.Background(), tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			p.Invalidate(tt.image) // static credentials stay
			again, err := p.Auth(context.Background(), tt.image)
			require.NoError(t, err)
			assert.Equal(t, tt.want, again)
			assert.Zero(t, imds.total.Load())
			assert.Empty(t, buf.String())
		})
	}
}

func TestStaticAuthBadData(t *testing.T) {
	const pw = "hunter2-very-secret"
	tests := []struct {
		name     string
		authType string
		data     string
		wantIn   []string
	}{
		{name: "not json", authType: AuthTypeDocker, data: `{"reg.example.com": {"username": "u", "password": "` + pw + `"`,
			wantIn: []string{"ECS_ENGINE_AUTH_DATA", "not valid JSON"}},
		{name: "json syntax inside password", authType: AuthTypeDocker, data: `{"reg.example.com": {"password": "` + pw + `" x}}`,
			wantIn: []string{"byte offset"}},
		{name: "not an object", authType: AuthTypeDocker, data: `["` + pw + `"]`, wantIn: []string{"not a JSON object of registries"}},
		{name: "entry not an object", authType: AuthTypeDocker, data: `{"reg.example.com": "` + pw + `"}`,
			wantIn: []string{`"reg.example.com"`}},
		{name: "numeric password", authType: AuthTypeDocker, data: `{"reg.example.com": {"username": "u", "password": 12345678901}}`,
			wantIn: []string{`"reg.example.com"`, `"password"`, "string"}},
		{name: "missing username", authType: AuthTypeDocker, data: `{"reg.example.com": {"password": "` + pw + `"}}`,
			wantIn: []string{`"reg.example.com"`, `"username"`}},
		{name: "dockercfg bad base64", authType: AuthTypeDockercfg, data: `{"reg.example.com": {"auth": "` + pw + `!!"}}`,
			wantIn: []string{`"reg.example.com"`, "base64"}},
		{name: "dockercfg no colon", authType: AuthTypeDockercfg, data: `{"reg.example.com": {"auth": "aHVudGVyMi12ZXJ5LXNlY3JldA=="}}`,
			wantIn: []string{`"reg.example.com"`, "user:password"}},
		{name: "dockercfg missing auth", authType: AuthTypeDockercfg, data: `{"reg.example.com": {"email": "` + pw + `"}}`,
			wantIn: []string{`"reg.example.com"`, `"auth"`}},
		{name: "duplicate hub keys", authType: AuthTypeDocker,
			data:   `{"docker.io": {"username": "a", "password": "` + pw + `"}, "https://index.docker.io/v1/": {"username": "b", "password": "` + pw + `"}}`,
			wantIn: []string{`"docker.io"`, `"https://index.docker.io/v1/"`}},
		{name: "empty key", authType: AuthTypeDocker, data: `{"https://": {"username": "a", "password": "` + pw + `"}}`,
			wantIn: []string{"names no registry host"}},
		{name: "data without type", authType: "", data: `{"reg.example.com": {"username": "u", "password": "` + pw + `"}}`,
			wantIn: []string{"ECS_ENGINE_AUTH_TYPE"}},
		{name: "unknown type", authType: "basic", data: `{"reg.example.com": {"username": "u", "password": "` + pw + `"}}`,
			wantIn: []string{`"basic"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(Config{AuthType: tt.authType, AuthData: config.Secret(tt.data)}, nil)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.True(t, errors.Is(err, ErrInvalidConfig))
			assert.True(t, errdefs.IsInvalidArgument(err))
			for _, want := range tt.wantIn {
				assert.Contains(t, err.Error(), want)
			}
			assert.NotContains(t, err.Error(), pw)
			assert.NotContains(t, err.Error(), "hunter")
			assert.NotContains(t, err.Error(), "12345678901")
		})
	}
}

func TestInvalidReferenceIsNotRetriable(t *testing.T) {
	p, err := New(Config{}, nil)
	require.NoError(t, err)
	for _, image := range []string{"", "/busybox"} {
		_, err = p.Auth(context.Background(), image)
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument, image)
		assert.Contains(t, err.Error(), "invalid image reference")
		assert.False(t, errdefs.IsRetriable(err), image)
	}
}

func TestParseECRHost(t *testing.T) {
	tests := []struct {
		host            string
		ok              bool
		account, region string
		fips            bool
	}{
		{host: "012345678901.dkr.ecr.us-east-1.amazonaws.com", ok: true, account: "012345678901", region: "us-east-1"},
		{host: "012345678901.dkr.ecr-fips.us-gov-west-1.amazonaws.com", ok: true, account: "012345678901", region: "us-gov-west-1", fips: true},
		{host: "012345678901.dkr.ecr.cn-north-1.amazonaws.com.cn", ok: true, account: "012345678901", region: "cn-north-1"},
		{host: "012345678901.dkr.ecr.eu-west-1.amazonaws.com:5000", ok: true, account: "012345678901", region: "eu-west-1"},
		{host: "012345678901.DKR.ECR.AP-SOUTHEAST-2.AMAZONAWS.COM", ok: true, account: "012345678901", region: "ap-southeast-2"},
		{host: "123.dkr.ecr.us-east-1.amazonaws.com"},
		{host: "0123456789012.dkr.ecr.us-east-1.amazonaws.com"},
		{host: "01234567890a.dkr.ecr.us-east-1.amazonaws.com"},
		{host: "012345678901.dkr.ecr.us-east-1.amazonaws.com.evil.com"},
		{host: "evil.com.012345678901.dkr.ecr.us-east-1.amazonaws.com"},
		{host: "012345678901.dkr.ecr.us-east-1.amazonaws.co"},
		{host: "012345678901.dkr.ecr..amazonaws.com"},
		{host: "012345678901.dkr.ecr.us-east-1.amazonaws.com:"},
		{host: "012345678901.dkr.ecr.us-east-1.amazonaws.com:port"},
		{host: "012345678901.dkr-ecr.us-east-1.amazonaws.com"},
		{host: "public.ecr.aws"},
		{host: "docker.io"},
		{host: ""},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			account, region, fips, ok := ParseECRHost(tt.host)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.account, account)
			assert.Equal(t, tt.region, region)
			assert.Equal(t, tt.fips, fips)
		})
	}
}
