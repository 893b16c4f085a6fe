#!/bin/sh
# berth preremove (deb prerm, rpm %preun). Arguments: deb "remove" or "upgrade" NEW-VERSION;
# rpm 0 on removal, 1 on upgrade.
# On removal only: stop the agent (its tasks' containers keep running, as on any agent stop) and
# disable the service so no dangling enablement symlink is left behind. Nothing on upgrade.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac

if [ -d /run/systemd/system ]; then
	systemctl stop berth.service || true
fi
# `disable` works offline too (it only removes symlinks), so run it whether systemd runs or not.
if command -v systemctl >/dev/null 2>&1; then
	systemctl --no-reload disable berth.service >/dev/null 2>&1 || true
fi
exit 0
