"""``kpsdk demo``'s body: the fixture programs with probes (:mod:`.programs`) and a host program
run by its real loader (:mod:`.linux`)."""
