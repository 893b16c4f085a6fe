package controlplane

import (
	"fmt"
	"time"

	"github.com/berth-agent/berth/agent/acswire"
	"github.com/berth-agent/berth/agent/taskcreds"
)

// storeCredentials stores a task role's credentials as ACS sent them. It fails, storing nothing,
// for credentials without an ID or with an expiration that is not RFC 3339; the error never
// contains a secret.
func (c *ControlPlane) storeCredentials(taskArn, roleType string, wire acswire.IAMRoleCredentials) error {
	creds, err := fromWire(taskArn, wire)
	if err != nil {
		return err
	}
	return c.creds.Put(taskArn, roleType, wire.CredentialsID, creds)
}

// fromWire converts ACS's credentials into taskcreds'; the expiration is RFC 3339, or absent.
func fromWire(taskArn string, wire acswire.IAMRoleCredentials) (taskcreds.Credentials, error) {
	creds := taskcreds.Credentials{RoleArn: wire.RoleArn, AccessKeyID: wire.AccessKeyID, SecretAccessKey: wire.SecretAccessKey,
		SessionToken: wire.SessionToken}
	if wire.Expiration != "" {
		exp, err := time.Parse(time.RFC3339, wire.Expiration)
		if err != nil {
			return taskcreds.Credentials{}, fmt.Errorf("credentials %s of task %s: expiration %q is not RFC 3339",
				taskcreds.ShortID(wire.CredentialsID), taskArn, wire.Expiration)
		}
		creds.Expiration = exp
	}
	return creds, nil
}
