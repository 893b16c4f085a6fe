package controlplane

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/berth-agent/berth/agent/ecsclient"
	"github.com/berth-agent/berth/agent/imds"
	"github.com/berth-agent/berth/agent/logger"
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
