-- The version of an environment's settings (autonomy), its ETag: PATCH /v1/environment_settings
-- honours If-Match (409 stale_write) and bumps it. Existing environments start at 1.
alter table environments add column settings_version int not null default 1;
