#!/bin/sh
# berth postinstall (deb postinst, rpm %post). Arguments: deb "configure" [OLD-VERSION];
# rpm 1 on install, 2 on upgrade.
# On install and upgrade: /etc/ecs/ecs.config is created from the package's template when there is
# none; an existing one (written by EC2 user data before the install, left by the ECS agent, edited) is
# left as it is. On install: systemd re-reads its units; the service is neither enabled nor started,
# since an operator writes /etc/ecs/ecs.config first (then: systemctl enable --now berth). On upgrade:
# the service, if it runs, restarts on the new binary (its tasks keep running and are picked up from
# the state file).
set -e

upgrade=false
case "$1" in
configure) [ -z "$2" ] || upgrade=true ;;
1) ;;
2) upgrade=true ;;
*) exit 0 ;; # abort-upgrade, abort-remove, ...: nothing was changed
esac

if [ ! -e /etc/ecs/ecs.config ] && [ ! -L /etc/ecs/ecs.config ]; then
	install -m 0600 -o root -g root /usr/share/berth/ecs.config /etc/ecs/ecs.config
fi

# Only when systemd is the running init: in a chroot, an image build or a container there is nothing to
# reload (the check debhelper's scripts make).
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	if [ "$upgrade" = true ]; then
		systemctl try-restart berth.service || true
	fi
fi
exit 0
