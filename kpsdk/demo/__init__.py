"""``kpsdk demo``'s body: the fixture programs with probes (:mod:`.programs`), a host program
run by its real loader (:mod:`.linux`) and a busybox pipeline traced across its processes
(:mod:`.pipeline`)."""
