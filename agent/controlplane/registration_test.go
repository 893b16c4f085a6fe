package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/berth-agent/berth/agent/config"
	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/engine"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/logger"
	"github.com/berth-agent/berth/agent/version"
)

// fakeIMDS answers registration's questions with fixed values or errors.
type fakeIMDS struct {
	id       imds.Identity
	idErr    error
	attrs    map[string]string
	attrsErr error
	tags     map[string]string
	tagsErr  error
}

func (f fakeIMDS) Identity(context.Context) (imds.Identity, error) { return f.id, f.idErr }

func (f fakeIMDS) Attributes(context.Context, imds.Identity) (map[string]string, error) {
	return f.attrs, f.attrsErr
}

func (f fakeIMDS) InstanceTags(context.Context) (map[string]string, error) { return f.tags, f.tagsErr }

// TestAddEC2Identity: the signed document and the EC2 attributes join the registration, the
// operator's attributes winning on a clash; without IMDS (off, or not answering) the instance
// registers as it was, and the attributes that could be read are kept when others could not.
func TestAddEC2Identity(t *testing.T) {
	id := imds.Identity{InstanceID: "i-0abc", Document: "{doc}", Signature: "sig"}
	for _, tt := range []struct {
		name      string
		imds      fakeIMDS
		wantID    string
		wantAttrs map[string]string
		wantDoc   string
	}{
		{"identity and attributes", fakeIMDS{id: id, attrs: map[string]string{"ecs.instance-type": "m5.large", "team": "ec2"}},
			"i-0abc", map[string]string{"ecs.instance-type": "m5.large", "team": "operator"}, "{doc}"},
		{"some attributes unreadable", fakeIMDS{id: id, attrs: map[string]string{"ecs.ami-id": "ami-1"}, attrsErr: errors.New("vpc-id: 404")},
			"i-0abc", map[string]string{"ecs.ami-id": "ami-1", "team": "operator"}, "{doc}"},
		{"IMDS off", fakeIMDS{idErr: fmt.Errorf("identity: %w", imds.ErrDisabled)}, "", map[string]string{"team": "operator"}, ""},
		{"IMDS not answering", fakeIMDS{idErr: errors.New("dial tcp: timeout")}, "", map[string]string{"team": "operator"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := ecsclient.Registration{Attributes: map[string]string{"team": "operator"}}
			got := AddEC2Identity(context.Background(), tt.imds, &reg, logger.Nop())
			assert.Equal(t, tt.wantID, got.InstanceID)
			assert.Equal(t, tt.wantAttrs, reg.Attributes)
			assert.Equal(t, tt.wantDoc, reg.InstanceIdentityDocument)
		})
	}
}

// TestAddEC2Tags: the instance's tags join the registration, ECS_CONTAINER_INSTANCE_TAGS winning on
// a clash; unreadable tags leave the registration's own.
func TestAddEC2Tags(t *testing.T) {
	reg := ecsclient.Registration{Tags: map[string]string{"env": "own"}}
	AddEC2Tags(context.Background(), fakeIMDS{tags: map[string]string{"env": "ec2", "Name": "web-1"}}, &reg, logger.Nop())
	assert.Equal(t, map[string]string{"env": "own", "Name": "web-1"}, reg.Tags)

	reg = ecsclient.Registration{Tags: map[string]string{"env": "own"}}
	AddEC2Tags(context.Background(), fakeIMDS{tagsErr: errors.New("404: instance metadata tags not allowed")}, &reg, logger.Nop())
	assert.Equal(t, map[string]string{"env": "own"}, reg.Tags)
}

// TestDetailedOSFamily: ecs.os-type-detailed is "<ID>_<VERSION_ID>" of os-release, as ecs-init
// computes it, quotes removed; "linux" without the file or either key.
func TestDetailedOSFamily(t *testing.T) {
	tests := []struct {
		name string
		in   io.Reader
		want string
	}{
		{"Amazon Linux 2023", strings.NewReader("NAME=\"Amazon Linux\"\nVERSION=\"2023\"\nID=\"amzn\"\nID_LIKE=\"fedora\"\nVERSION_ID=\"2023\"\n"), "amzn_2023"},
		{"Debian 12", strings.NewReader("PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_ID='12'\nID=debian\n"), "debian_12"},
		{"Ubuntu", strings.NewReader("ID=ubuntu\nVERSION_ID=\"24.04\"\n"), "ubuntu_24.04"},
		{"no VERSION_ID", strings.NewReader("ID=arch\n"), "linux"},
		{"no file", nil, "linux"},
	}
	for _, tc := range tests {
		if got := DetailedOSFamily(tc.in); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestNewRegistrationVersions: the agent version registered (and sent to ACS and TCS) is the ECS
// agent release Berth speaks, the hash Berth's build, the Docker version the Engine's.
func TestNewRegistrationVersions(t *testing.T) {
	reg := NewRegistration(&config.Config{External: true, AWSVPCBlockIMDS: true}, engine.Resources{}, "27.3.1", "1.47",
		strings.NewReader("ID=amzn\nVERSION_ID=2023\n"))
	if reg.AgentVersion != "1.105.1" || reg.AgentHash != version.GitHash || reg.DockerVersion != "27.3.1" {
		t.Errorf("versions %q %q %q, want 1.105.1, %q, 27.3.1", reg.AgentVersion, reg.AgentHash, reg.DockerVersion, version.GitHash)
	}
	if reg.OSFamilyDetailed != "amzn_2023" || !reg.External || !reg.BlockIMDS {
		t.Errorf("os family %q external %v block IMDS %v", reg.OSFamilyDetailed, reg.External, reg.BlockIMDS)
	}
}
