#!/bin/sh
# berth postremove (deb postrm, rpm %postun). Arguments: deb "remove", "purge", "upgrade", ...;
# rpm 0 on removal, 1 on upgrade.
# After removal systemd re-reads its units so berth.service is gone from it. Purge removes only what
# dpkg owns (empty package directories): /etc/ecs/ecs.config (the operator's, maybe written before the
# install), the state in /var/lib/ecs/data and the logs in /var/log/ecs are left, since the Amazon ECS
# agent uses the same paths.
set -e

case "$1" in
remove | purge | 0) ;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
