// Audit entries (aud_...): operator actions that change customer state outside the normal event
// flow (challenge progress revoke, challenge reevaluate). One row per action, written after the
// actor journaled the change, naming the acting credential, the target, the customer and a reason.
import { newId } from '../../ids.js';
import type { Sql } from './db.js';

export interface AuditInput {
  actorCredentialId: string;
  actorKind: string;
  action: string;
  targetType: string;
  targetId: string;
  customerId: string | null;
  reason: string;
  details: Record<string, unknown>;
}

export class AuditLog {
  constructor(private readonly sql: Sql) {}

  async record(environmentId: string, e: AuditInput): Promise<string> {
    const id = newId('aud');
    await this.sql`
      insert into audit_entries (environment_id, id, actor_credential_id, actor_kind, action, target_type, target_id, customer_id, reason, details)
      values (${environmentId}, ${id}, ${e.actorCredentialId}, ${e.actorKind}, ${e.action}, ${e.targetType}, ${e.targetId}, ${e.customerId},
        ${e.reason}, (${JSON.stringify(e.details)}::text)::jsonb)`;
    return id;
  }
}
