#!/bin/sh
# Stage 1 of the guest (/init of the initramfs). The initramfs is the kernel's rootfs,
# on which pivot_root(2) fails, and bwrap pivots; so copy the image into a tmpfs,
# switch_root into it, and hand over to the agent as PID 1 (vm-tests/guest).
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
mkdir -p /newroot
mount -t tmpfs -o mode=0755 tmpfs /newroot
for e in /* /.[!.]*; do
	case $e in
	/newroot | /dev | /proc | /sys | '/.[!.]*') ;;
	*) cp -a "$e" /newroot/ ;;
	esac
done
mkdir -p /newroot/dev /newroot/proc /newroot/sys
umount -l /dev
exec switch_root /newroot /sbin/toh-vm-guest
