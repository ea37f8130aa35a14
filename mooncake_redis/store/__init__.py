"""Objects and what writes them: put_start and register (registration) with the wait for
room (waiting), put_end, get and probes (objects), deletion, segments, and the events every
write announces (events). Imports the core, the tree and capacity."""
