package execagent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth-agent/berth/agent/atomicfile"
)

// Where the managed agent's files go, as the ECS agent lays them out (agent/engine/execcmd,
// manager_init_task_linux.go): everything under /ecs-execute-command-<ID> in the container, its
// logs in /var/log/amazon/ssm, kept on the host in <log dir>/<task ID>/<container>.
const (
	containerDirPrefix  = "/ecs-execute-command-"
	containerConfigFile = "configuration/amazon-ssm-agent.json"
	containerLogConfig  = "configuration/seelog.xml"
	containerCertFile   = "certs/amazon-ssm-agent.crt"
	containerLogDir     = "/var/log/amazon/ssm"

	configFileName    = "amazon-ssm-agent.json"
	logConfigFileName = "seelog.xml"

	// defaultSessionLimit is the SSM agent's SessionWorkersLimit when ACS's sessionLimit property is
	// absent, not a number or not positive.
	defaultSessionLimit = 2

	// execUser is the user the agent runs as in the container: root, as the ECS agent runs it.
	execUser = "0"
)

// ssmConfig is the SSM agent's configuration the ECS agent generates, with the session workers
// limit; UseDualStackEndpoint is false: Berth does not detect IPv6-only hosts.
func ssmConfig(sessionLimit int) string {
	return `{
	"Mgs": {
		"StopTimeoutMillis": 20000,
		"SessionWorkersLimit": ` + strconv.Itoa(sessionLimit) + `
	},
	"Agent": {
		"ContainerMode": true,
		"UseDualStackEndpoint": false
	}
}`
}

// seelogConfig is the SSM agent's log configuration the ECS agent generates: its log files in the
// log directory the host keeps.
const seelogConfig = `<seelog type="adaptive" mininterval="2000000"
	maxinterval="100000000" critmsgcount="500" minlevel="info">
<exceptions>
<exception filepattern="test*" minlevel="error"/>
</exceptions>
<outputs formatid="fmtinfo">
<console formatid="fmtinfo"/>
<rollingfile type="size"
	filename="/var/log/amazon/ssm/amazon-ssm-agent.log"
	maxsize="40000000" maxrolls="1"/>
<filter levels="error,critical" formatid="fmterror">
   <rollingfile type="size"
		filename="/var/log/amazon/ssm/errors.log"
		maxsize="10000000" maxrolls="1"/>
</filter>
</outputs>
<formats>
<format id="fmterror" format="%Date %Time %LEVEL [%FuncShort @ %File.%Line] %Msg%n"/>
<format id="fmtdebug" format="%Date %Time %LEVEL [%FuncShort @ %File.%Line] %Msg%n"/>
<format id="fmtinfo" format="%Date %Time %LEVEL %Msg%n"/>
</formats>
</seelog>`

// sessionLimit reads ACS's sessionLimit property.
func sessionLimit(props map[string]string) int {
	n, err := strconv.Atoi(props["sessionLimit"])
	if err != nil || n <= 0 {
		return defaultSessionLimit
	}
	return n
}

// fsName is a container name as a directory name: without leading hyphens, "" when nothing is left.
func fsName(name string) string { return strings.TrimLeft(name, "-") }

// containerFiles are one container's files on the host.
type containerFiles struct {
	configDir string // <deps>/config/<task ID>/<container>: amazon-ssm-agent.json, seelog.xml
	logDir    string // <log dir>/<task ID>/<container>
}

// write makes the container's configuration files (0600, in 0700 directories) and its log
// directory (0700); on failure it removes what it made.
func (f containerFiles) write(sessionLimit int) (err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, f.remove())
		}
	}()
	for _, d := range []string{f.configDir, f.logDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	for name, content := range map[string]string{configFileName: ssmConfig(sessionLimit), logConfigFileName: seelogConfig} {
		if err := writeFile(filepath.Join(f.configDir, name), content); err != nil {
			return err
		}
	}
	return nil
}

// remove removes the container's configuration directory (not its logs, kept until the task's
// cleanup).
func (f containerFiles) remove() error { return os.RemoveAll(f.configDir) }

// writeFile replaces path with content, mode 0600, never following a link at path.
func writeFile(path, content string) error { return atomicfile.Write(path, []byte(content), 0o600) }

// binds are the container's bind mounts, in Docker's "host:container[:ro]" form: the binaries, the
// configuration and the CA bundle read-only under /ecs-execute-command-<id>, the log directory
// read-write.
func binds(b Binaries, f containerFiles, id string) []string {
	dir := containerDirPrefix + id
	ro := func(host, ctr string) string { return host + ":" + ctr + ":ro" }
	out := make([]string, 0, 7)
	for _, name := range requiredBinaries {
		out = append(out, ro(filepath.Join(b.Dir, name), dir+"/"+name))
	}
	return append(out,
		ro(filepath.Join(f.configDir, configFileName), dir+"/"+containerConfigFile),
		ro(filepath.Join(f.configDir, logConfigFileName), dir+"/"+containerLogConfig),
		ro(b.Cert, dir+"/"+containerCertFile),
		f.logDir+":"+containerLogDir,
	)
}

// agentCommand is the command that starts the agent in the container.
func agentCommand(id string) []string { return []string{containerDirPrefix + id + "/" + SSMAgentBin} }
