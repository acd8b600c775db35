"""Linux hardware access: NIC interrupt throttling (`itr`, driver profiles in `nic_profiles`), CPU frequency (`dvfs`), RAPL energy (`rapl`),
MSR devices (`msr`), the read/write layer with rollback (`hwio`), saved originals (`originals`) and the
read-only start-up checks (`doctor`). Nothing outside this package writes to hardware."""
