"""Following a log: the trusted state that only advances through verified steps, its
local storage, the sources it reads a log from, and the follower that drives them."""
