
Node_A!i1