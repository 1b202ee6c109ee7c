package auth

import (
	luciusv1 "github.com/lucius-platform/lucius/contract/lucius/v1"
)

var (
	partnerOrOperator = []Role{RolePartner, RoleOperator}
	operatorOnly      = []Role{RoleOperator}
	workerOnly        = []Role{RoleWorker}
	anyRole           = []Role{RolePartner, RoleOperator, RoleWorker}
)

// MethodRoles is the one table of who may call what: every RPC Lucius
// serves, by full method name, and the roles allowed. A method missing from
// it is denied to everyone (a test fails when the contract has an RPC the
// table lacks). Tenant scoping happens in the handlers: a partner sees only
// its tenants' jobs and dead letters, and another tenant's are NOT_FOUND.
var MethodRoles = map[string][]Role{
	luciusv1.CommandService_Submit_FullMethodName: partnerOrOperator,

	luciusv1.JobService_GetJob_FullMethodName:        partnerOrOperator,
	luciusv1.JobService_ListJobs_FullMethodName:      partnerOrOperator,
	luciusv1.JobService_ListJobSteps_FullMethodName:  partnerOrOperator,
	luciusv1.JobService_ListJobEvents_FullMethodName: partnerOrOperator,
	luciusv1.JobService_CancelJob_FullMethodName:     partnerOrOperator,
	luciusv1.JobService_ReplayJob_FullMethodName:     partnerOrOperator,
	luciusv1.JobService_WatchJob_FullMethodName:      partnerOrOperator,
	luciusv1.JobService_WatchJobs_FullMethodName:     partnerOrOperator,

	luciusv1.DeadLetterService_ListDeadLetters_FullMethodName: partnerOrOperator,
	luciusv1.DeadLetterService_GetDeadLetter_FullMethodName:   partnerOrOperator,
	luciusv1.AssetService_GetAsset_FullMethodName:             partnerOrOperator,
	luciusv1.AssetService_LookupAsset_FullMethodName:          partnerOrOperator,
	luciusv1.AssetService_ListAssetRevisions_FullMethodName:   partnerOrOperator,
	luciusv1.AssetService_RollbackAsset_FullMethodName:        partnerOrOperator,
	luciusv1.AssetService_DeleteAsset_FullMethodName:          partnerOrOperator,
	luciusv1.AssetService_SetAssetApproval_FullMethodName:     partnerOrOperator,

	// Partners may read and validate definitions: they name the request
	// types a partner can submit. Registering one is an operator's change.
	luciusv1.WorkflowService_RegisterWorkflow_FullMethodName: operatorOnly,
	luciusv1.WorkflowService_ValidateWorkflow_FullMethodName: partnerOrOperator,
	luciusv1.WorkflowService_GetWorkflow_FullMethodName:      partnerOrOperator,
	luciusv1.WorkflowService_ListWorkflows_FullMethodName:    partnerOrOperator,

	luciusv1.ConfigService_GetGlobalConfig_FullMethodName:    operatorOnly,
	luciusv1.ConfigService_UpdateGlobalConfig_FullMethodName: operatorOnly,
	luciusv1.ConfigService_GetTenantConfig_FullMethodName:    operatorOnly,
	luciusv1.ConfigService_ListTenantConfigs_FullMethodName:  operatorOnly,
	luciusv1.ConfigService_UpdateTenantConfig_FullMethodName: operatorOnly,
	luciusv1.ConfigService_DeleteTenantConfig_FullMethodName: operatorOnly,
	luciusv1.ConfigService_PauseWork_FullMethodName:          operatorOnly,
	luciusv1.ConfigService_ResumeWork_FullMethodName:         operatorOnly,
	luciusv1.ConfigService_ListPauses_FullMethodName:         operatorOnly,

	luciusv1.RunbookService_ApplyRunbook_FullMethodName:     operatorOnly,
	luciusv1.RunbookService_GetRunbook_FullMethodName:       operatorOnly,
	luciusv1.RunbookService_ListRunbooks_FullMethodName:     operatorOnly,
	luciusv1.RunbookService_LoadMembers_FullMethodName:      operatorOnly,
	luciusv1.RunbookService_ListBatches_FullMethodName:      operatorOnly,
	luciusv1.RunbookService_GetBatch_FullMethodName:         operatorOnly,
	luciusv1.RunbookService_ListBatchMembers_FullMethodName: operatorOnly,

	luciusv1.CircuitBreakerService_ListCircuitBreakers_FullMethodName: operatorOnly,
	luciusv1.CircuitBreakerService_GetCircuitBreaker_FullMethodName:   operatorOnly,
	luciusv1.CircuitBreakerService_ResetCircuitBreaker_FullMethodName: operatorOnly,

	luciusv1.WorkerService_RegisterWorker_FullMethodName: workerOnly,
	luciusv1.WorkerService_ListWorkers_FullMethodName:    operatorOnly,

	luciusv1.CallbackService_Ack_FullMethodName:              workerOnly,
	luciusv1.CallbackService_Result_FullMethodName:           workerOnly,
	luciusv1.CallbackService_Heartbeat_FullMethodName:        workerOnly,
	luciusv1.CallbackService_GetDirective_FullMethodName:     workerOnly,
	luciusv1.CallbackService_RecordCheckpoint_FullMethodName: workerOnly,

	// A console session cannot mint tickets (the handler refuses it): only
	// the principal's own token or certificate can.
	luciusv1.ConsoleService_CreateConsoleTicket_FullMethodName: partnerOrOperator,

	// Reflection describes the API, not its data: any authenticated caller.
	"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      anyRole,
	"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": anyRole,
}

// OpenMethods need no credentials: load balancers and orchestrators probe them.
var OpenMethods = map[string]bool{
	"/grpc.health.v1.Health/Check": true,
	"/grpc.health.v1.Health/Watch": true,
	"/grpc.health.v1.Health/List":  true,
}
