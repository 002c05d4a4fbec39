SELECT false, state, fp, response FROM hand_requests WHERE key = 'rk';
