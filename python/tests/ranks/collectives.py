"""Every collective and dtype on the job's Comm and on Comms that split makes of it, so one
job of 5 ranks checks communicators of 1 to 5 ranks."""

import check
import hetsync

world = hetsync.init()
r = world.rank()
assert hetsync.init() is world
assert world.size() == 5, world.size()
assert 0 <= world.local_rank() < world.local_size() == 5
check.check_errors(world)
check.check_comm(world, "world of 5")
for name, color_of in (("2+3", lambda i: 0 if i < 2 else 1), ("1+4", lambda i: 0 if i == 0 else 1)):
    # Keys reverse the order: the member of highest job rank is rank 0 of its Comm.
    sub = world.split(color_of(r), key=-r)
    members = [i for i in range(5) if color_of(i) == color_of(r)]
    assert (sub.rank(), sub.size()) == (len(members) - 1 - members.index(r), len(members)), (sub.rank(), members)
    check.check_comm(sub, "split %s, %d ranks" % (name, sub.size()))
    sub.close()
assert world.split(-1) is None
hetsync.finalize()
print("collectives ok", r)
