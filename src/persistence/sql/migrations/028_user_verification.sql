-- How each user row came to exist and whether its email address is proven. Signup proves nothing
-- (anyone may type any address); only a sign-in with an identity provider's ID token does. An
-- invitation to a user whose address is not proven waits (memberships.pending) until that user
-- signs in, so a signup that took someone else's address never gains the invitation's access.
--   origin: signup (POST /auth/signup), invitation (POST .../memberships for an unknown address),
--           sign_in (first sign-in with an identity provider).
--   email_verified_at: the first sign-in with an ID token for this address; null: unproven.
alter table users add column origin text not null default 'signup'
  check (origin in ('signup', 'invitation', 'sign_in'));
alter table users add column email_verified_at timestamptz;

-- Existing rows: a linked identity proves the address. A row without one was made by signup when
-- it holds the PAT signup issues, else by an invitation; a linked row without that PAT by sign-in.
update users set email_verified_at = created_at where oidc_subject is not null;
update users u set origin = case
    when exists (select 1 from credentials c where c.user_id = u.id and c.kind = 'pat' and c.name = 'signup') then 'signup'
    when u.oidc_subject is not null then 'sign_in'
    else 'invitation'
  end;
alter table users alter column origin drop default;

-- A pending membership grants nothing (credentials, organization lists, member routes ignore it)
-- until its user's address is proven; the first such sign-in makes it effective.
alter table memberships add column pending boolean not null default false;

-- Existing memberships stay effective: a migration cannot tell an invitation a squatter took from
-- one its owner accepted, and making them pending would lock out members of deployments without
-- an identity provider for good (they can never sign in). The rule holds for invitations made
-- from now on; an owner who doubts an older one removes that member.
