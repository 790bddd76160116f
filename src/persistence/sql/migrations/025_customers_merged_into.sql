-- A customer merged into another (customer.merged): lists leave it out, since its id and external
-- id now answer as the survivor. Null for every other customer.
alter table customers add column merged_into text;
