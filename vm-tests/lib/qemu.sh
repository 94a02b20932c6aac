# Boot one leg under qemu. Sourced by run-matrix.sh.
#
# TCG only: /dev/kvm on this kind of machine is not hardware KVM and qemu hangs with
# -enable-kvm. No network device at all (-nic none). Every run is bounded by timeout(1);
# qemu exits by itself when the guest powers off (or panics: panic=-1 + -no-reboot).

# boot_leg LEG KERNELDIR INITRAMFS OUTDIR "EXTRA ARGS": writes OUTDIR/console.log
# (ttyS0: kernel and agent messages) and OUTDIR/results.log (ttyS1: result lines).
# Returns timeout's status (124 when the leg ran out of time).
boot_leg() {
	local leg=$1 kdir=$2 initrd=$3 out=$4 extra=$5 rel
	rel=$(kernel_release "$kdir")
	mkdir -p "$out"
	: >"$out/console.log"
	: >"$out/results.log"
	local started=$SECONDS rc=0
	timeout --kill-after=10 "$LEG_TIMEOUT" qemu-system-x86_64 \
		-accel tcg -cpu max -smp 1 -m 1024 \
		-nodefaults -no-user-config -display none -nic none -no-reboot \
		-kernel "$kdir/boot/vmlinuz-$rel" -initrd "$initrd" \
		-append "console=ttyS0 panic=-1 loglevel=4 toh.leg=$leg $extra" \
		-serial "file:$out/console.log" -serial "file:$out/results.log" \
		</dev/null >"$out/qemu.log" 2>&1 &
	# timeout(1) passes a TERM on to qemu: run-matrix.sh's exit trap uses this pid.
	echo $! >"$out/timeout.pid"
	wait $! || rc=$?
	rm -f "$out/timeout.pid"
	echo $((SECONDS - started)) >"$out/seconds"
	echo "$rc" >"$out/qemu-status"
	return "$rc"
}
