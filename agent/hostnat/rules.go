package hostnat

import (
	"strconv"
	"strings"
)

// The addresses the NAT joins: containers ask for EndpointIP:EndpointPort, the agent serves on
// 127.0.0.1:ListenPort.
const (
	EndpointIP   = "169.254.170.2"
	EndpointPort = 80
	ListenPort   = 51679
)

// Chains of ours, each jumped to from one built-in chain by one rule. Everything Berth adds is in
// them or is one of those jumps, and every rule carries the comment berth-task-endpoint (or, on a
// DNAT rule, berth-task-endpoint:set-route_localnet).
const (
	// ChainNAT (nat, from PREROUTING) holds one DNAT rule per bridge.
	ChainNAT = "BERTH-TASK-ENDPOINT"
	// ChainHost (nat, from OUTPUT) holds the REDIRECT of the host's own traffic, only when
	// Config.HostNetwork is set.
	ChainHost = "BERTH-TASK-ENDPOINT-HOST"
	// ChainGuard (filter, from INPUT) drops what a bridge sends to 127.0.0.0/8 without being DNATed
	// by ChainNAT: route_localnet would otherwise let a container reach every service bound to the
	// host's loopback (CVE-2020-8558; ecs-init adds the same rule).
	ChainGuard = "BERTH-TASK-ENDPOINT"
)

// Comments on our rules. labelSetLocalnet marks a bridge's DNAT rule when Install turned
// route_localnet on for that bridge: it is the record Remove restores from, kept with the rule so
// that it survives an agent restart and reaches `berth cleanup-task-endpoint-nat`.
const (
	label            = "berth-task-endpoint"
	labelSetLocalnet = "berth-task-endpoint:set-route_localnet"
)

// rule is one iptables rule: its table, its chain, and its specification in the order
// `iptables -S` prints it.
type rule struct {
	table, chain string
	spec         []string
}

// String renders r as `iptables -S` lists it, with the table in front.
func (r rule) String() string {
	return "-t " + r.table + " -A " + r.chain + " " + strings.Join(r.spec, " ")
}

func endpointDst() []string {
	return []string{"-d", EndpointIP + "/32"}
}

func endpointPort() []string {
	return []string{"-p", "tcp", "-m", "tcp", "--dport", strconv.Itoa(EndpointPort)}
}

func comment(c string) []string { return []string{"-m", "comment", "--comment", c} }

func join(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// dnatRule sends what bridge forwards to the endpoint to 127.0.0.1:ListenPort. setLocalnet chooses
// the comment that records that Install turned route_localnet on for bridge.
func dnatRule(bridge string, setLocalnet bool) rule {
	c := label
	if setLocalnet {
		c = labelSetLocalnet
	}
	return rule{"nat", ChainNAT, join(endpointDst(), []string{"-i", bridge}, endpointPort(), comment(c),
		[]string{"-j", "DNAT", "--to-destination", "127.0.0.1:" + strconv.Itoa(ListenPort)})}
}

// redirectRule sends the host's own connections to the endpoint to ListenPort on loopback.
func redirectRule() rule {
	return rule{"nat", ChainHost, join(endpointDst(), endpointPort(), comment(label),
		[]string{"-j", "REDIRECT", "--to-ports", strconv.Itoa(ListenPort)})}
}

// guardRule drops a new connection from bridge to 127.0.0.0/8 that is not one DNATed to us.
func guardRule(bridge string) rule {
	return rule{"filter", ChainGuard, join([]string{"-d", "127.0.0.0/8", "-i", bridge, "-m", "conntrack", "!",
		"--ctstate", "RELATED,ESTABLISHED,DNAT"}, comment(label), []string{"-j", "DROP"})}
}

// jump is the rule of a built-in chain that sends its packets through our chain target; first says
// whether it goes at the top of the built-in chain (-I 1) rather than at its end (-A).
type jump struct {
	rule
	target string
	first  bool
}

func newJump(table, from, to string, first bool) jump {
	return jump{rule{table, from, join(comment(label), []string{"-j", to})}, to, first}
}

// natJump, hostJump and guardJump are the three jumps. The guard goes first in INPUT so that no
// ACCEPT of the host's firewall comes before it; the NAT jumps are appended, as ecs-init does.
func natJump() jump   { return newJump("nat", "PREROUTING", ChainNAT, false) }
func hostJump() jump  { return newJump("nat", "OUTPUT", ChainHost, false) }
func guardJump() jump { return newJump("filter", "INPUT", ChainGuard, true) }

// listed is what Install and Remove read back from one of our chains: a rule as `iptables -S`
// printed it, with the interface it matches and its comment.
type listed struct {
	iface, comment string
}

// parseListed reads the `-i` interface and the comment of a line of `iptables -S CHAIN`. ok is false
// for lines that are not rules (`-N CHAIN`).
func parseListed(line string) (l listed, ok bool) {
	f := fields(line)
	if len(f) == 0 || f[0] != "-A" {
		return listed{}, false
	}
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "-i":
			l.iface = f[i+1]
		case "--comment":
			l.comment = f[i+1]
		}
	}
	return l, true
}

// fields splits a line of `iptables -S` into its words; a double-quoted word (iptables quotes a
// comment that needs it) loses its quotes and backslash escapes.
func fields(line string) []string {
	var out []string
	var cur strings.Builder
	inWord, quoted, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted = !quoted
			inWord = true
		case !quoted && (r == ' ' || r == '\t'):
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
