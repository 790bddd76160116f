-- A recovering partition reads all its routing keys once to build its "never seen" filter.
create index customer_keys_partition on customer_keys (partition);
